/* SPDX-License-Identifier: MIT */
/*
 * rundir.h - which runtime directory rpal_init() accepts.  rundir_setup()
 * (region.c) refuses a directory by it, `rpal doctor` reports on one by it,
 * and `rpal stat` reads a user's only if it passes, so that they never
 * disagree.  Private to librpal and the rpal command: do not include from
 * applications.
 */
#ifndef RPAL_RUNDIR_H
#define RPAL_RUNDIR_H

#include <sys/stat.h>
#include <unistd.h>

enum rpal_rundir_verdict {
	RPAL_RUNDIR_OK,
	RPAL_RUNDIR_NO_STAT,        /* lstat() failed; errno says why */
	RPAL_RUNDIR_SYMLINK,        /* a symbolic link in the directory's place */
	RPAL_RUNDIR_NOT_DIR,        /* something else that is not a directory */
	RPAL_RUNDIR_NOT_OURS,       /* owned by neither its user (us: euid) nor root */
	RPAL_RUNDIR_ANYONE_WRITES,  /* others may write it: mode & 0002 */
};

/*
 * Judge a directory of user's from its lstat() (or fstat() of it opened
 * with O_NOFOLLOW).  The owner may be root (a directory made for the
 * user), and a group may write it: peers of several uids share it to share
 * the slot lock file, and so get distinct slots.
 */
static inline enum rpal_rundir_verdict rpal_rundir_judge(const struct stat *st, uid_t user)
{
	if (S_ISLNK(st->st_mode))
		return RPAL_RUNDIR_SYMLINK;
	if (!S_ISDIR(st->st_mode))
		return RPAL_RUNDIR_NOT_DIR;
	if (st->st_uid != user && st->st_uid != 0)
		return RPAL_RUNDIR_NOT_OURS;
	if (st->st_mode & 0002)
		return RPAL_RUNDIR_ANYONE_WRITES;
	return RPAL_RUNDIR_OK;
}

/*
 * Judge dir, ours, and fill *st.  lstat(), not stat(): the checks are of
 * the directory itself, and a link could point elsewhere by the time the
 * sockets and the slot lock are made in it.
 */
static inline enum rpal_rundir_verdict rpal_rundir_check(const char *dir, struct stat *st)
{
	if (lstat(dir, st) < 0)
		return RPAL_RUNDIR_NO_STAT;
	return rpal_rundir_judge(st, geteuid());
}

#endif
