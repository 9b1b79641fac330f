/* Files a daemon writes at a path from its settings. The daemons run as root, and a path
 * in a directory someone else can write may hold a symbolic link to any file on the
 * host by the time they open it: these calls follow no link and write into no file they
 * did not make (docs/security.md, "Files").
 *
 * Errors: -1 with errno set (ELOOP: the path is a symbolic link; EEXIST: something that
 * is not a regular file is there); rp_file_why turns it into words for the caller's
 * sentence.
 */
#ifndef RAMPART_FILE_CREATE_H
#define RAMPART_FILE_CREATE_H

#include <sys/types.h>

/* A new file at path, open for writing: O_CREAT | O_EXCL | O_NOFOLLOW, after removing a
 * regular file a crash left there (unlink takes a name away, never writes a target).
 * A descriptor, or -1 with errno. */
int rp_file_create(const char *path, mode_t mode);

/* A file kept across runs (a lock), opened read-write and created when missing, never
 * through a link: the descriptor of a regular file, or -1 with errno. */
int rp_file_open_kept(const char *path, mode_t mode);

/* A file opened for reading, never through a link: a descriptor, or -1 with errno. */
int rp_file_open_read(const char *path);

/* 0 when a file may be renamed over path (nothing there, or a regular file); -1 with
 * errno when it is a link or anything else. */
int rp_file_replaceable(const char *path);

/* Why a call above failed, in words: for ELOOP and EEXIST what to do, else strerror. */
const char *rp_file_why(int errnum);

#endif
