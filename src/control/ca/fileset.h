#ifndef STRAIT_CONTROL_CA_FILESET_H
#define STRAIT_CONTROL_CA_FILESET_H

#include <stddef.h>
#include <sys/types.h>

/*
 * A set of files in one directory replaced as one: the CA's four layout
 * files, a node's key, chain and root. A crash (SIGKILL, power loss) at
 * any point leaves either every old file or every new one, never a key
 * beside a certificate it does not belong to.
 *
 * How (a small redo journal, the way databases write a page set):
 *
 *   1. DIR/.pending/ is created (mode 0700) and every new file is written
 *      into it, each fsynced;
 *   2. DIR/.pending/.complete is written and fsynced, then the directory:
 *      from here on the new set is decided;
 *   3. each file is renamed from .pending/ into DIR (rename is atomic per
 *      file), DIR is fsynced;
 *   4. .complete is removed, then .pending/.
 *
 * fileset_recover() finishes or undoes an interrupted write: with
 * .complete present it redoes step 3 for the files still in .pending/ and
 * then step 4; without it, it removes .pending/ and what it holds. Every
 * reader of such a set calls it first.
 */

#define FILESET_PENDING ".pending"
#define FILESET_COMPLETE ".complete"
#define FILESET_MAX 8

struct fileset_file {
    const char *name; /* a plain file name in dir, no '/' */
    const void *data;
    size_t len;
    mode_t mode; /* 0600 for keys, 0644 for certificates */
};

/*
 * fileset_write() replaces files[0..n) in dir (which must exist) as one,
 * after recovering any earlier interrupted write. 0, or -1 with an
 * allocated message in *err naming the file and the cause. A write that
 * fails before step 2 is undone at once: dir holds the old set. One that
 * fails after it (a rename refused by a failing disk) is completed by the
 * next fileset_recover(): a reader never sees a mix of the two.
 */
int fileset_write(const char *dir, const struct fileset_file *files, size_t n,
                  char **err);

/*
 * fileset_write_steps() is fileset_write() stopped after max_steps
 * file-system steps, as a crash would stop it; for crash-consistency
 * tests. Returns 1 when it stopped early, 0 when it finished, -1 on error.
 */
int fileset_write_steps(const char *dir, const struct fileset_file *files,
                        size_t n, size_t max_steps, char **err);

/*
 * fileset_recover() completes or rolls back an interrupted write in dir.
 * 1 when it found one, 0 when there was none (or dir does not exist), -1
 * with *err when .pending cannot be handled (e.g. it is not a directory).
 */
int fileset_recover(const char *dir, char **err);

#endif
