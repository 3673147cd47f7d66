/* hosted.h: the pieces of rpal hosted mode that do not depend on librpal (docs/HOSTED.md).
 *
 * Loader: load independently built PIE executables into their own glibc linker namespaces
 * (dlmopen LM_ID_NEWLM) in one address space and run each one's main() in a process of its own
 * (clone with CLONE_VM), on a thread created by that namespace's libc (loader.c).
 *
 * Launcher: the loop of `rpal run` and the host block with the process-wide signal handlers
 * (launch.c, host.c; the block's layout is rpal_host.h).
 *
 * User-mode switch: hosted_ctx_* and hosted_switch* (callee-saved registers, rsp, MXCSR, x87 CW,
 * and the fs base by wrfsbase or arch_prctl; switch_x86_64.S, ctx.c).  librpal compiles these two
 * files in for its RPAL calls (src/call.c). */
#ifndef RPAL_HOSTED_H
#define RPAL_HOSTED_H

#include <stddef.h>
#include <stdio.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Loader
 * ------------------------------------------------------------------------------------------- */

typedef struct hosted_prog hosted_prog;

/* Room for a sentence of the loader or the host (err of hosted_load, a host's answer to a joiner):
 * it names a program by its path, up to PATH_MAX, and gives the reason after it. */
#define HOSTED_ERR_MAX (PATH_MAX + 1024)

/* Values of GLIBC_TUNABLES that hosted_reexec_with_tunables() adds. */
#define HOSTED_NNS 16 /* glibc's hard maximum of namespaces (DL_NNS), base included */
#define HOSTED_STATIC_TLS_DEFAULT 65536 /* bytes of optional static TLS (RPAL_HOSTED_STATIC_TLS) */
/* Bytes the launcher's executable sets aside below every thread pointer for a program's own
 * thread-locals (its executable's PT_TLS, addressed at fixed offsets there): the most a hosted
 * executable may have. */
#define HOSTED_EXE_TLS_ROOM 16384

/* If GLIBC_TUNABLES does not already set glibc.rtld.nns, re-execute /proc/self/exe with
 * GLIBC_TUNABLES=glibc.rtld.nns=16:glibc.rtld.optional_static_tls=<n> appended (n from the
 * environment variable RPAL_HOSTED_STATIC_TLS, default HOSTED_STATIC_TLS_DEFAULT).  Must be called at
 * the top of main(), before any thread is started.  Returns only when no re-exec was needed (or the
 * exec failed: then a warning is printed and fewer programs can be loaded). */
void hosted_reexec_with_tunables(int argc, char **argv);

/* How many more programs this process can load at most: glibc's 16 namespaces (DL_NNS) minus those
 * in use.  Static TLS may run out earlier when glibc.rtld.nns / optional_static_tls are not raised. */
int hosted_ns_limit(void);

/* Watch the dynamic linker's locks (load, list, TLS) from a thread of their own: one whose owner
 * thread has ended (a program killed while it held it, inside dlopen, dlclose, thread creation or
 * C++ unwinding) would hold every later load for ever, the launcher's included; it is released
 * within HOSTED_LINKER_WATCH_MS, with a line on stderr after prefix, unless a call is in flight in
 * host h then (hosted_host_calls_in_flight).  0, or -1 where this glibc
 * keeps its locks otherwise (nothing is ever released then) or no thread could be started. */
struct rpal_host;
int hosted_linker_watch(struct rpal_host *h, const char *prefix);
#define HOSTED_LINKER_WATCH_MS 1000

/* The environment that hosted programs should see: the process environment minus what
 * hosted_reexec_with_tunables() added.  A NULL-terminated array owned by the library. */
char **hosted_clean_environ(void);

/* Load a program.  path: a PIE executable linked with -rdynamic (main must be in the dynamic
 * symbol table).  argv: argc strings (argv[0] is the program name the program sees); envp: a
 * NULL-terminated environment (NULL: hosted_clean_environ()).  Both are copied.  The constructors
 * of the program's libraries run here, on the calling thread, with envp as environ; the
 * executable's own run in its process just before main (hosted_start).  Returns NULL and writes a
 * message to err on failure. */
hosted_prog *hosted_load(const char *path, int argc, char *const argv[], char *const envp[],
                         char *err, size_t errlen);

/* The address ranges of the code of the program's executable and of every library of its
 * namespace (not the dynamic linker or the vDSO, which all namespaces share), at most max of
 * them, in lo[] and hi[] (hi exclusive): the count. */
int hosted_code_ranges(const hosted_prog *p, uintptr_t *lo, uintptr_t *hi, int max);
/* In the object whose ELF header is mapped at base: its one executable segment in *lo and *hi (hi
 * exclusive), and the address returned, of glibc's signal return in it ("mov $15, %rax; syscall",
 * __restore_rt, which libc does not export; any match of those bytes is those instructions).
 * 0, and *lo = *hi = 0, where it has none, or several executable segments. */
uintptr_t hosted_find_sigreturn(uintptr_t base, uintptr_t *lo, uintptr_t *hi);
/* The code range of the namespace's libc, in *lo and *hi (hi exclusive), for the launcher to
 * publish as the one Syscall User Dispatch lets through on the program's threads: 1, and the
 * program's process will return from the launcher's SIGSYS handler through that libc; or 0 where
 * its signal return was not found (a libc other than glibc's), and the program's threads keep the
 * launcher's range. */
int hosted_libc_code(hosted_prog *p, uintptr_t *lo, uintptr_t *hi);

/* Start the program as a process of its own that shares this address space (its own PID,
 * descriptor table, signal dispositions, cwd, umask and rlimits, copied from ours when it starts;
 * descriptors marked close-on-exec are closed in it, as exec would), and run the executable's
 * constructors and main() there on a thread created by the program's own libc.  The process is
 * our child (SIGCHLD; hosted_wait reaps it) and is killed when the thread that started it ends.
 * 0 or -1 (message in err). */
int hosted_start(hosted_prog *p, char *err, size_t errlen);

/* What a program's process gets instead of the launcher's (hosted_start_spawn). */
typedef struct hosted_spawn {
    int fds[3];     /* become its descriptors 0, 1, 2; -1 keeps the launcher's */
    int only_std_fds; /* 1: it keeps descriptors 0, 1, 2 only; 0: all but the close-on-exec ones */
    int own_pgrp;     /* 1: it leads a process group of its own; 0: it stays in the launcher's */
    const char *cwd; /* NULL: the launcher's; else the name of cwd_fd, for messages */
    int cwd_fd;      /* with cwd: that directory (O_PATH will do), which it enters (fchdir) */
    int umask;      /* -1: the launcher's */
    _Atomic int *pid_out; /* receives its PID before main() runs; may be NULL */
    int set_sigmask;      /* 1: its main thread starts with sigmask (bit n-1: signal n) */
    uint64_t sigmask;
    int set_ignored;      /* 1: signals in ignored are ignored, all others take their default
                           * action (else: caught ones are reset, ignored ones stay, as exec) */
    uint64_t ignored;
    int nrlimits;
    struct {
        int resource;
        unsigned long long cur, max;
    } rlimits[16];
} hosted_spawn;

/* hosted_start with the descriptors, directory, umask and rlimits of sp (NULL: the launcher's). */
int hosted_start_spawn(hosted_prog *p, const hosted_spawn *sp, char *err, size_t errlen);

/* Wait until the program's process has ended: exit() from any of its threads (after its exit
 * handlers, the executable's destructors and a flush of its stdio), a return from main, or a
 * signal.  Returns the exit status (0..255; 128 + the signal when one ended it), -1 if it was never
 * started. */
int hosted_wait(hosted_prog *p);

/* Non-blocking: 1 when its process has ended (and is reaped), 0 when still running. */
int hosted_done(hosted_prog *p);

/* The signal that ended it (after hosted_done or hosted_wait), 0 when it exited. */
int hosted_signal(const hosted_prog *p);

/* Whether the kernel wrote a core dump of it as that signal ended it (RLIMIT_CORE, core_pattern). */
int hosted_core_dumped(const hosted_prog *p);

/* Its process's PID, 0 before it has started. */
int hosted_pid(const hosted_prog *p);

/* The programs loaded so far, in load order (they are never freed: their namespaces point into
 * them). */
int hosted_count(void);
hosted_prog *hosted_get(int i);

/* Look a symbol up in the program's namespace (the executable first, then its libraries). */
void *hosted_sym(hosted_prog *p, const char *name);

/* The fs base (thread pointer, TCB) of the program's main thread: valid after hosted_start(). */
uintptr_t hosted_main_fsbase(const hosted_prog *p);

/* The kernel thread id of the program's main thread (0 before it has started). */
int hosted_main_tid(const hosted_prog *p);

/* glibc namespace id of the program. */
long hosted_lmid(const hosted_prog *p);

const char *hosted_path(const hosted_prog *p);

/* What hosted_depie did to the copy. */
struct hosted_copy {
    int was_pie;     /* DF_1_PIE was set */
    int origin_kept; /* strings that keep $ORIGIN: no room in the file for their expansion */
    uint64_t relro_vaddr, relro_memsz; /* its PT_GNU_RELRO, if any (memsz 0 if none) */
    char file[PATH_MAX]; /* the name of the file opened, as its descriptor says; "" if unknown */
    /* The thread-local variables it defines and exports, as NUL-terminated names ending with an
     * empty one (malloc'd; the caller frees it), or NULL. */
    char *tls_names;
};

/* Make a copy of the ELF executable at path in a memfd with DF_1_PIE cleared in DT_FLAGS_1, its
 * initializers hidden from the dynamic linker (hosted_start runs them), and $ORIGIN in its
 * DT_NEEDED, DT_RPATH and DT_RUNPATH strings expanded to the file's directory.  Returns the memfd
 * (close-on-exec, sealed against any change of size or content) or -1 with a message in err;
 * *info (may be NULL) says what was changed.  Exposed for tests. */
int hosted_depie(const char *path, struct hosted_copy *info, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * Launcher (launch.c, host.c)
 * ------------------------------------------------------------------------------------------- */

struct rpal_host;

/* PROG as execvp(3) finds it: PROG itself when it has a slash, else the first file (not a
 * directory) of that name in PATH ("/usr/local/bin:/usr/bin:/bin" when unset; an empty element,
 * the last one included, is the current directory) that we may execute, or else the first that
 * exists, in buf (the loader then says why it cannot run it, EACCES as execvp would).  NULL when
 * there is none. */
const char *hosted_find_in_path(const char *prog, char *buf, size_t len);

/* Load, start and wait for "PROGRAM [ARGS...] [::: PROGRAM [ARGS...]]..." (argv[0..argc)), printing
 * each one's exit status on stderr as "<me>: [i] path exited with status N" (unless quiet; a failure
 * inside an RPAL call is always reported).  Every program's librpal joins host (RPAL_HOST).
 * Returns 0 if all exited 0, 1 if one did not, 2 on a usage or load error, and -S where a program
 * was killed by a signal S that also reached us (Ctrl-C at the terminal, a kill passed on): the
 * caller then ends by S itself, as a shell expects of a job that the signal ended. */
int hosted_launch(const char *me, int argc, char **argv, struct rpal_host *host, const char *rundir, int quiet);

/* How an RPAL call took part in a program's end, in the sentences rpal run, rpal host and rpal join
 * print on f, each line after prefix: lost, it ended while one of its threads ran another
 * program's receiver; failed, the signal of a fault inside a call into it (fault_addr), or SIGKILL
 * where a caller's thread ended (killed, or ended by its execve) while running its receiver.
 * Returns the number of lines. */
int hosted_print_call_end(FILE *f, const char *prefix, const char *path, int pid, int lost, int failed,
                          uint64_t fault_addr);

/* The process's host block for RPAL calls: reserves the rpal region (base, slot size and count as
 * librpal's configuration says) and installs the SIGSYS and fault handlers.  NULL with a message. */
struct rpal_host *hosted_host_create(uint64_t region_base, uint64_t slot_size, uint32_t nr_slots,
                                     char *err, size_t errlen);
/* How often hosted_host_unmap_unread() looks when not asked to look now. */
#define HOSTED_UNREAD_SWEEP_MS 10000
/* Unmap the arenas of peers outside the host that a killed program was the last to read, or whose
 * last reader found processes outside reading too, once their owner has gone (slots.lock in rundir
 * says so: no owner, no reader, no program mapping there).  Looks now (after a program ended), or
 * when HOSTED_UNREAD_SWEEP_MS have passed since the last look.  The number unmapped. */
int hosted_host_unmap_unread(struct rpal_host *h, const char *rundir, int now);
/* 1 if one process may take a descriptor of another with pidfd_getfd (Linux 5.6; a seccomp policy
 * or a security module may refuse it): how a sender kicks a receiver in another program.  Tried on
 * a child process. */
int hosted_getfd_works(void);
/* Register a program (in launch order); its index, or -1 when the block is full. */
int hosted_host_add(struct rpal_host *h, const char *name);
/* Program prog's code (hosted_code_ranges): a system call made from it during a call that one of
 * its threads makes into another program is its own (a signal handler's), not the receiver's.
 * Also sets the code that Syscall User Dispatch lets through on its threads: its libc's
 * (hosted_libc_code), where found. */
void hosted_host_set_code(struct rpal_host *h, int prog, hosted_prog *p);
/* Give back the index that the last hosted_host_add returned, for a program that never started:
 * 0, or -1 when it is not the last one or its libraries' code already registered in it. */
int hosted_host_unadd(struct rpal_host *h, int prog);
/* The environment for program prog: base (NULL: hosted_clean_environ()) plus RPAL_HOST, last.
 * The array and that last entry are malloc'd; the others are base's. */
char **hosted_host_environ(struct rpal_host *h, int prog, char *const *base);
/* Program prog's process has ended (reaped): its connections and receivers are closed to calls,
 * and a receiver of another program that one of its threads was running fails that program.
 * Returns how many such receivers were lost. */
int hosted_host_ended(struct rpal_host *h, int prog);
/* Program prog's process (pid) no longer shares our memory: it called execve(), which ended its
 * other threads, and a receiver of another program that one of them ran is lost with it.  Then
 * as hosted_host_ended (its new image talks to the others through connected mode) and returns the
 * receivers lost; -1 while it shares our memory, where that cannot be told, or once ended. */
int hosted_host_execd(struct rpal_host *h, int prog, int pid);
/* 1 while some thread runs a receiver of h in an RPAL call. */
int hosted_host_calls_in_flight(struct rpal_host *h);
/* How often rpal host looks for a program that called execve() (hosted_host_execd). */
#define HOSTED_EXEC_CHECK_MS 1000
/* What rpal run and rpal host print when hosted_host_execd() found receivers lost. */
int hosted_print_exec_lost(FILE *f, const char *prefix, const char *path, int pid, int lost);

/* ---------------------------------------------------------------------------------------------
 * User-mode context switch (switch_x86_64.S, ctx.c)
 * ------------------------------------------------------------------------------------------- */

/* A suspended context: everything else (rbx, rbp, r12-r15, MXCSR, x87 CW, return address) lies on
 * its own stack.  fs is the fs base to load when switching in with the *_fs variants. */
typedef struct hosted_ctx {
    void *sp;
    uintptr_t fs;
} hosted_ctx;

/* 1 when the CPU and kernel let user mode run rdfsbase/wrfsbase (AT_HWCAP2 bit 1). */
int hosted_have_fsgsbase(void);

/* Prepare ctx to start entry(arg) on [stack, stack+size) at its first switch-in.  entry must not
 * return (it switches away for good); if it does, the process aborts. ctx->fs is set to 0: set it
 * before switching in with a *_fs variant. */
void hosted_ctx_make(hosted_ctx *ctx, void *stack, size_t size, void (*entry)(void *), void *arg);

/* Save the current context in from, resume to.  Returns when something switches back to from.
 * hosted_switch: registers and stack only, fs untouched.
 * hosted_switch_fs: also stores the current fs base in from->fs and loads to->fs, with wrfsbase
 *   where available, else with arch_prctl(ARCH_SET_FS) (selected once, see hosted_switch_init()).
 * hosted_switch_wrfs / hosted_switch_prctl: the two fs variants, forced (benchmarks, tests). */
void hosted_switch(hosted_ctx *from, hosted_ctx *to);
void hosted_switch_fs(hosted_ctx *from, hosted_ctx *to);
void hosted_switch_wrfs(hosted_ctx *from, hosted_ctx *to);
void hosted_switch_prctl(hosted_ctx *from, hosted_ctx *to);

/* The current fs base (reads %fs:0, the TCB self pointer of the x86-64 TLS ABI). */
uintptr_t hosted_get_fs(void);

/* For the lazy switch (host.c's SIGSYS handler and src/call.c).  hosted_ctx_jump_wrfs: resume to
 * (fs by wrfsbase) without saving anything: a signal handler leaves for the sender's call point.
 * hosted_lazy_resume: save the current context in save, then resume the context captured in the
 * signal frame whose ucontext is at uc, on this thread, by rt_sigreturn; a later switch to save
 * returns from the call; it runs on the receiver's own thread, outside any call of that thread.
 * hosted_sud_allowed_start/end: the code that Syscall User Dispatch lets through on the threads of
 * a program whose libc has no range of its own (hosted_libc_code). */
void hosted_ctx_jump_wrfs(hosted_ctx *to) __attribute__((noreturn));
void hosted_lazy_resume(hosted_ctx *save, void *uc);
extern char hosted_sud_allowed_start[], hosted_sud_allowed_end[];
/* The restorer of the launcher's SIGSYS handler, inside that range; a program's process replaces
 * it with its libc's signal return where found. */
void hosted_sigsys_restorer(void);

#ifdef __cplusplus
}
#endif
#endif
