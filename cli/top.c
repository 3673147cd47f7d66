/* SPDX-License-Identifier: MIT */
/*
 * top.c - `rpal top`: the statistics pages (snap.c) read each interval, and
 * per connection the rates between two readings, busiest first.  A plain
 * ANSI screen on a terminal (raw input for the keys, the alternate screen,
 * put back on exit); --batch, or output that is not a terminal, prints
 * plain frames one after the other.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "snap.h"

/* One connection at one reading, and its rates since the one before. */
struct row {
	uint32_t pid, slot;
	uint64_t id;
	char name[64];
	struct snap_conn c;
	double out_s, in_s, bytes_s, wake_s, sleep_s, full_s;
	double wake_share;            /* of messages sent, the share that needed a wake-up; <0: none sent */
	double spin_share;            /* of the interval, the share spent spinning */
};

struct frame {
	struct row *rows;
	unsigned n;
	unsigned nprocs;
	unsigned listeners;           /* of the processes shown: an idle server has no row */
	uint64_t t_ns;
	char looked[sizeof(((struct snap *)0)->looked)]; /* where snap_take() looked */
};

/* What the command line asked for ("" for everything), for an empty frame. */
static const char *asked = "";

enum sort { SORT_MSGS, SORT_BYTES, SORT_WAKE, SORT_SLEEP, SORT_PID };
static const char *const sort_name[] = { "messages/s", "bytes/s", "wake-ups/s", "sleeps/s", "pid" };

/*
 * The signals are never blocked: a handler sets its flag and writes a byte
 * to wake_fd, which every wait polls, so that one that comes between a
 * look at the flags and the wait ends the wait at once.  The handlers are
 * installed without SA_RESTART: a write() they interrupt returns.
 */
static volatile sig_atomic_t stop, suspend, resumed;
static int wake_fd[2] = { -1, -1 };
static bool catch_tstp;
static struct termios saved_tio;
static volatile sig_atomic_t tio_saved; /* read by on_quit() */
static FILE *out;                       /* standard output, through out_write() */

/* Autowrap back on, cursor shown, the main screen back. */
static const char screen_leave[] = "\033[?7h\033[?25h\033[?1049l";

static void wake(void)
{
	int e = errno;

	(void)!write(wake_fd[1], "", 1);        /* full: a wake-up is pending anyway */
	errno = e;
}

static void wake_drain(void)
{
	char buf[64];
	int e = errno;

	while (read(wake_fd[0], buf, sizeof(buf)) > 0)
		;
	errno = e;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
	wake();
}

static void on_suspend(int sig)
{
	(void)sig;
	suspend = 1;
	wake();
}

static void on_continue(int sig)
{
	(void)sig;
	resumed = 1;
	wake();
}

/* Ctrl-\ ends us with a core dump of where we were: the terminal is put
 * back here, then the signal, taken again with its default action, comes
 * as this handler returns. */
static void on_quit(int sig)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	int e = errno;

	if (tio_saved) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
		(void)!write(STDOUT_FILENO, screen_leave, sizeof(screen_leave) - 1);
	}
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	raise(sig);
	errno = e;
}

static void catch_signal(int sig, void (*fn)(int))
{
	struct sigaction sa = { .sa_handler = fn };

	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

/*
 * The write function of out.  It waits for room on standard output in
 * poll(), beside wake_fd, and writes at most PIPE_BUF bytes at a time (a
 * pipe that polls writable takes that many without waiting): a signal that
 * ends us never finds us waiting for a reader that does not read.  Once
 * stop is set, what the output cannot take at once is dropped, and the
 * write fails (EINTR).
 */
static ssize_t out_write(void *cookie, const char *buf, size_t len)
{
	size_t done = 0;

	(void)cookie;
	while (done < len) {
		struct pollfd p[2] = { { STDOUT_FILENO, POLLOUT, 0 }, { wake_fd[0], POLLIN, 0 } };
		size_t chunk = len - done < PIPE_BUF ? len - done : PIPE_BUF;
		ssize_t n;

		if (poll(p, 2, stop ? 0 : -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents & POLLIN)
			wake_drain();
		if (!p[0].revents) {
			if (stop) {
				errno = EINTR;
				break;
			}
			continue;
		}
		n = write(STDOUT_FILENO, buf + done, chunk);
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			break;
		if (n > 0)
			done += (size_t)n;
	}
	return (ssize_t)done;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int usage(FILE *f)
{
	fprintf(f,
"usage: rpal top [--batch] [-n N] [-d SECONDS] [--sort KEY] [--dir DIR] [PID | SERVICE]\n"
"\n"
"The connections of every rpal process of this user (every user's, for root),\n"
"with their rates over each interval, busiest first.\n"
"\n"
"  -b, --batch          plain text frames, no terminal control (implied when\n"
"                       the output is not a terminal)\n"
"  -n, --iterations N   stop after N frames (default: until q or a signal)\n"
"  -d, --delay SECONDS  the interval (default 1; at least 0.05)\n"
"  -s, --sort KEY       m messages/s (default), b bytes/s, w wake-ups/s,\n"
"                       s sleeps/s, p pid\n"
"      --dir DIR        read the pages of runtime directory DIR only\n"
"  -h, --help           this text\n"
"\n"
"Keys: q quits; m, b, w, s, p sort as --sort does.\n"
"Columns: PID and NAME the process, CONN its connection's number (not a count),\n"
"PEER the peer's pid, SERVICE the name; OUT/s and IN/s messages, INQ messages\n"
"the peer sent that are not yet received (- where the peer's page is not\n"
"found), BYTES/s both ways, WAKE%% the share of sent messages that needed a\n"
"wake-up system call, WAKE/s those calls, SLEEP/s, FULL/s sends that met a\n"
"full ring, SPIN%% the share of the interval spent spinning (see rpal-top(1)).\n");
	return f == stdout ? 0 : 2;
}

static int row_key_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static enum sort sort_by;

static int cmp_double(double a, double b)
{
	return a < b ? 1 : a > b ? -1 : 0;      /* descending */
}

static int row_sort_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	int r = 0;

	switch (sort_by) {
	case SORT_MSGS:
		r = cmp_double(x->out_s + x->in_s, y->out_s + y->in_s);
		break;
	case SORT_BYTES:
		r = cmp_double(x->bytes_s, y->bytes_s);
		break;
	case SORT_WAKE:
		r = cmp_double(x->wake_s, y->wake_s);
		break;
	case SORT_SLEEP:
		r = cmp_double(x->sleep_s, y->sleep_s);
		break;
	case SORT_PID:
		break;
	}
	return r ? r : row_key_cmp(a, b);
}

static double rate(uint64_t now, uint64_t then, double secs)
{
	return now >= then ? (double)(now - then) / secs : 0;   /* a reused id restarts from 0 */
}

/* Read the pages into f, with rates against prev (sorted by key). */
static int frame_take(const struct snap_where *w, const struct snap_filter *filt, const struct frame *prev,
		      struct frame *f, char *why, size_t whylen)
{
	struct snap s;
	unsigned i, j;

	memset(f, 0, sizeof(*f));
	if (snap_take(w, &s, why, whylen))
		return -1;
	snap_select(&s, filt);
	f->t_ns = mono_ns();
	memcpy(f->looked, s.looked, sizeof(f->looked));
	f->nprocs = s.nprocs;
	for (i = 0; i < s.nprocs; i++) {
		f->n += s.procs[i].nconns;
		f->listeners += s.procs[i].nlisteners;
	}
	f->rows = calloc(f->n ? f->n : 1, sizeof(*f->rows));
	if (!f->rows) {
		snap_free(&s);
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	f->n = 0;
	for (i = 0; i < s.nprocs; i++) {
		for (j = 0; j < s.procs[i].nconns; j++) {
			struct row *r = &f->rows[f->n++];

			r->pid = s.procs[i].pid;
			r->slot = s.procs[i].slot;
			r->id = s.procs[i].conns[j].id;
			memcpy(r->name, s.procs[i].name, sizeof(r->name));
			r->c = s.procs[i].conns[j];
		}
	}
	snap_free(&s);
	for (i = 0; prev && i < f->n; i++) {
		struct row *r = &f->rows[i];
		const struct row *o = bsearch(r, prev->rows, prev->n, sizeof(*r), row_key_cmp);
		static const struct snap_conn zero;
		const struct snap_conn *p = o ? &o->c : &zero;
		double secs = (double)(f->t_ns - prev->t_ns) / 1e9;
		uint64_t sent;

		if (secs <= 0)
			secs = 1e-9;
		r->out_s = rate(r->c.msgs_sent, p->msgs_sent, secs);
		r->in_s = rate(r->c.msgs_received, p->msgs_received, secs);
		r->bytes_s = rate(r->c.bytes_sent + r->c.bytes_received, p->bytes_sent + p->bytes_received, secs);
		r->wake_s = rate(r->c.wakeups_sent + r->c.room_wakeups, p->wakeups_sent + p->room_wakeups, secs);
		r->sleep_s = rate(r->c.tx_sleeps + r->c.rx_sleeps, p->tx_sleeps + p->rx_sleeps, secs);
		r->full_s = rate(r->c.ring_full, p->ring_full, secs);
		r->spin_share = rate(r->c.tx_spin_ns + r->c.rx_spin_ns, p->tx_spin_ns + p->rx_spin_ns, secs) / 1e9;
		sent = r->c.msgs_sent >= p->msgs_sent ? r->c.msgs_sent - p->msgs_sent : 0;
		r->wake_share = sent ? rate(r->c.wakeups_sent, p->wakeups_sent, 1) / (double)sent : -1;
		/* The two counters are read a moment apart: a wake-up of a
		 * message sent after the read can be counted with them. */
		if (r->wake_share > 1)
			r->wake_share = 1;
	}
	qsort(f->rows, f->n, sizeof(*f->rows), row_key_cmp);
	return 0;
}

/* 1234567 -> "1.23M": rates fit their columns. */
static const char *human(double v, char *buf, size_t len)
{
	static const char unit[] = " kMGTP";
	unsigned u = 0;

	while (v >= 999.5 && u < sizeof(unit) - 2) {
		v /= 1000;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.*f%c", v < 9.995 ? 2 : v < 99.95 ? 1 : 0, v, unit[u]);
	return buf;
}

/* One frame: the header, then the rows in at most max_lines lines (0: all),
 * the last of them "(N more)" where not all fit.  eol ends each line: "\n"
 * in batch mode, "\033[K\n" on a screen (clears what the previous frame
 * left on the line). */
static void frame_print(struct frame *f, unsigned max_lines, const char *eol)
{
	bool cut = max_lines && f->n > max_lines;
	unsigned shown = cut ? max_lines - 1 : f->n;
	char tbuf[16], a[16], b[16], c[16], d[16], e[16], g[16], ws[16], q[16];
	time_t now = time(NULL);
	double tot = 0;
	unsigned i;

	strftime(tbuf, sizeof(tbuf), "%H:%M:%S", localtime(&now));
	for (i = 0; i < f->n; i++)
		tot += f->rows[i].out_s;
	/* Sorting reorders what the next frame searches: copy, sort, restore. */
	struct row *sorted = malloc((f->n ? f->n : 1) * sizeof(*sorted));

	if (!sorted)
		return;
	memcpy(sorted, f->rows, f->n * sizeof(*sorted));
	qsort(sorted, f->n, sizeof(*sorted), row_sort_cmp);
	fprintf(out, "rpal top - %s  %u process%s, %u connection%s, %s messages/s; sorted by %s%s", tbuf, f->nprocs,
	       f->nprocs == 1 ? "" : "es", f->n, f->n == 1 ? "" : "s", human(tot, a, sizeof(a)), sort_name[sort_by],
	       eol);
	fprintf(out, "%s", eol);
	fprintf(out, "%7s %-12s %4s %7s %-16s %7s %7s %6s %7s %5s %7s %7s %7s %5s%s", "PID", "NAME", "CONN", "PEER",
	       "SERVICE", "OUT/s", "IN/s", "INQ", "BYTES/s", "WAKE%", "WAKE/s", "SLEEP/s", "FULL/s", "SPIN%", eol);
	for (i = 0; i < shown; i++) {
		const struct row *r = &sorted[i];

		if (r->wake_share < 0)
			snprintf(ws, sizeof(ws), "-");
		else
			snprintf(ws, sizeof(ws), "%.1f", 100 * r->wake_share);
		/* A connection whose peer is gone has rates of 0, as an idle one
		 * does: say which it is, after the last column. */
		if (r->c.in_queue < 0)
			snprintf(q, sizeof(q), "-");
		else
			human((double)r->c.in_queue, q, sizeof(q));
		fprintf(out, "%7u %-12.12s %4llu %7u %-16.16s %7s %7s %6s %7s %5s %7s %7s %7s %5.1f%s%s", r->pid, r->name,
		       (unsigned long long)r->id, r->c.peer_pid, r->c.service[0] ? r->c.service : "-",
		       human(r->out_s, a, sizeof(a)), human(r->in_s, b, sizeof(b)), q, human(r->bytes_s, c, sizeof(c)), ws,
		       human(r->wake_s, d, sizeof(d)), human(r->sleep_s, e, sizeof(e)), human(r->full_s, g, sizeof(g)),
		       100 * r->spin_share,
		       r->c.status & RPAL_STAT_ERROR ? " error" : r->c.status & RPAL_STAT_PEER_GONE ? " peer-gone" : "",
		       eol);
	}
	if (cut)
		fprintf(out, "(%u more)%s", f->n - shown, eol);
	/* An empty frame says where it looked: a mistyped name or another
	 * runtime directory would read as an idle server. */
	if (!f->n)
		fprintf(out, "(no open connection%s%s in %s; %u listener%s)%s", *asked ? " of " : "", asked, f->looked,
			f->listeners, f->listeners == 1 ? "" : "s", eol);
	free(sorted);
}

static void screen_restore(void)
{
	if (!tio_saved)
		return;
	while (tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio) < 0 && errno == EINTR)
		;
	fputs(screen_leave, out);
	fflush(out);
	tio_saved = 0;
}

/* Also after a stop: the shell that took the terminal meanwhile set its
 * own modes.  The terminal's settings are saved once, at the start or
 * after screen_restore(): stopped by SIGSTOP, we left ours on it. */
static int screen_setup(void)
{
	static bool registered;
	struct termios t;

	if (!tio_saved && tcgetattr(STDIN_FILENO, &saved_tio) < 0)
		return -errno;
	t = saved_tio;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	/* Saved before the change: a SIGQUIT in between puts back too much,
	 * never too little. */
	tio_saved = 1;
	while (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) < 0) {
		if (errno != EINTR) {
			int e = errno;

			tio_saved = 0;
			return -e;
		}
	}
	if (!registered)
		atexit(screen_restore);
	registered = true;
	/* The alternate screen, cursor hidden, no autowrap: long lines are cut. */
	fputs("\033[?1049h\033[?25l\033[?7l", out);
	return 0;
}

/* The lines a frame's rows may take on the screen: all but the header's
 * three and the last, where the cursor's newline would scroll the header
 * away.  At least one, for "(N more)". */
static unsigned screen_lines(void)
{
	struct winsize ws;
	unsigned rows = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 || !ws.ws_row ? 24 : ws.ws_row;

	return rows > 5 ? rows - 4 : 1;
}

static bool sort_key(int ch)
{
	switch (ch) {
	case 'm': sort_by = SORT_MSGS; return true;
	case 'b': sort_by = SORT_BYTES; return true;
	case 'w': sort_by = SORT_WAKE; return true;
	case 's': sort_by = SORT_SLEEP; return true;
	case 'p': sort_by = SORT_PID; return true;
	}
	return false;
}

static void frame_free(struct frame *f)
{
	free(f->rows);
	memset(f, 0, sizeof(*f));
}

int cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "batch", no_argument, NULL, 'b' },
		{ "iterations", required_argument, NULL, 'n' },
		{ "delay", required_argument, NULL, 'd' },
		{ "sort", required_argument, NULL, 's' },
		{ "dir", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct snap_where where = { 0 };
	struct snap_filter filt;
	struct frame prev = { 0 }, cur;
	bool batch = false, screen;
	long iters = -1, done = 0;
	double delay = 1;
	char why[300], *end;
	int c, ret = 0;

	optind = 1;
	argv[0] = "rpal top";           /* getopt's messages name the command */
	sort_by = SORT_MSGS;
	while ((c = getopt_long(argc, argv, "bn:d:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			batch = true;
			break;
		case 'n':
			iters = strtol(optarg, &end, 10);
			if (*end || iters < 1) {
				fprintf(stderr, "rpal top: --iterations wants a count >= 1, not \"%s\"\n", optarg);
				return 2;
			}
			break;
		case 'd':
			delay = strtod(optarg, &end);
			if (*end || !(delay >= 0.05 && delay <= 3600)) {
				fprintf(stderr, "rpal top: --delay wants seconds in [0.05, 3600], not \"%s\"\n", optarg);
				return 2;
			}
			break;
		case 's':
			if (strlen(optarg) != 1 || !sort_key(optarg[0])) {
				fprintf(stderr, "rpal top: --sort wants m, b, w, s or p, not \"%s\"\n", optarg);
				return 2;
			}
			break;
		case 'D':
			where.dir = optarg;
			break;
		case 'h':
			return usage(stdout);
		default:
			return usage(stderr);
		}
	}
	if (argc - optind > 1 || snap_filter_parse(optind < argc ? argv[optind] : NULL, &filt)) {
		fprintf(stderr, "rpal top: %s\n\n", argc - optind > 1 ? "one PID or SERVICE at most"
							   : !argv[optind][0] ? "an empty SERVICE"
							   : "PID out of range");
		return usage(stderr);
	}
	static char asked_buf[96];
	if (filt.pid >= 0)
		snprintf(asked_buf, sizeof(asked_buf), "pid %ld", filt.pid);
	else if (filt.service)
		snprintf(asked_buf, sizeof(asked_buf), "service %s", filt.service);
	asked = asked_buf;
	screen = !batch && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
	out = fopencookie(NULL, "w", (cookie_io_functions_t){ .write = out_write });
	if (!out || pipe2(wake_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
		fprintf(stderr, "rpal top: %s\n", strerror(errno));
		return 1;
	}
	setvbuf(out, NULL, _IOFBF, 64 << 10);   /* a frame in one flush */
	catch_signal(SIGINT, on_signal);
	catch_signal(SIGTERM, on_signal);
	catch_signal(SIGHUP, on_signal);
	if (screen) {
		struct sigaction old;

		/* Where Ctrl-\ was ignored before us (a background job of a
		 * shell without job control), it stays so. */
		if (sigaction(SIGQUIT, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
			catch_signal(SIGQUIT, on_quit);
	}
	if (screen && screen_setup() < 0)
		screen = false;
	if (screen) {
		struct sigaction old;

		/* Where Ctrl-Z was ignored before us (no job control), it stays so. */
		catch_tstp = sigaction(SIGTSTP, NULL, &old) == 0 && old.sa_handler == SIG_DFL;
		if (catch_tstp)
			catch_signal(SIGTSTP, on_suspend);
		catch_signal(SIGCONT, on_continue);
	}
	if (frame_take(&where, &filt, NULL, &prev, why, sizeof(why))) {
		screen_restore();
		fprintf(stderr, "rpal top: %s\n", why);
		return 1;
	}
	if (screen) {
		fputs("\033[H\033[2Jrpal top: reading...\033[K\n", out);
		fflush(out);
	}
	while (!stop && (iters < 0 || done < iters)) {
		uint64_t deadline = prev.t_ns + (uint64_t)(delay * 1e9);
		bool redraw = false;

		/* Wait out the interval; a key may quit or re-sort at once. */
		for (;;) {
			uint64_t now = mono_ns();
			struct pollfd p[2] = { { wake_fd[0], POLLIN, 0 }, { screen ? STDIN_FILENO : -1, POLLIN, 0 } };
			char ch;

			struct timespec left = { (time_t)((deadline - now) / 1000000000),
						 (long)((deadline - now) % 1000000000) };

			if (now >= deadline || stop || suspend || resumed)
				break;
			if (ppoll(p, 2, &left, NULL) <= 0)
				continue;
			if (p[0].revents & POLLIN)
				wake_drain();
			if (!(p[1].revents & POLLIN) || read(STDIN_FILENO, &ch, 1) != 1)
				continue;
			if (ch == 'q' || ch == 'Q') {
				stop = 1;
				break;
			}
			if (sort_key(ch) && done) {
				redraw = true;
				break;
			}
		}
		if (stop)
			break;
		if (suspend) {
			/* Ctrl-Z: the shell gets its screen, cursor and modes back
			 * while we are stopped. */
			suspend = 0;
			screen_restore();
			catch_signal(SIGTSTP, SIG_DFL);
			raise(SIGTSTP);
			if (catch_tstp)
				catch_signal(SIGTSTP, on_suspend);
			resumed = 1;
		}
		if (resumed) {
			resumed = 0;
			if (screen_setup() < 0) {
				/* Frames drawn for a screen we do not have would be noise. */
				fprintf(stderr, "rpal top: cannot set up the terminal again: %s\n", strerror(errno));
				ret = 1;
				break;
			}
			if (!done) {
				fputs("\033[H\033[2Jrpal top: reading...\033[K\n", out);
				fflush(out);
				continue;
			}
			redraw = true;
		}
		if (redraw) {
			fputs("\033[H", out);
			frame_print(&prev, screen_lines(), "\033[K\n");
			fputs("\033[J", out);
			fflush(out);
			continue;
		}
		if (frame_take(&where, &filt, &prev, &cur, why, sizeof(why))) {
			ret = 1;
			screen_restore();
			fprintf(stderr, "rpal top: %s\n", why);
			break;
		}
		frame_free(&prev);
		prev = cur;
		if (stop)
			break;          /* a signal while we read the pages */
		if (screen) {
			fputs("\033[H", out);
			frame_print(&prev, screen_lines(), "\033[K\n");
			fputs("\033[J", out);       /* clear below: fewer rows than last time */
		} else {
			frame_print(&prev, 0, "\n");
			fputc('\n', out);
		}
		/* Nobody reads on: a full disk, or a reader gone where SIGPIPE
		 * is ignored.  Or a signal came while the output waited. */
		if (fflush(out) || ferror(out)) {
			if (stop)
				break;
			fprintf(stderr, "rpal top: cannot write the output: %s\n", strerror(errno));
			ret = 1;
			break;
		}
		done++;
	}
	/* What the output did not take stays untaken: the terminal's modes
	 * and screen come back alone. */
	if (ferror(out)) {
		__fpurge(out);
		clearerr(out);
	}
	frame_free(&prev);
	screen_restore();
	return ret;
}
