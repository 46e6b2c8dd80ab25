/* LD_PRELOAD shim: make one fsync/fdatasync of a chosen file fail with EIO, as a failed
 * writeback does on Linux, and drop the bytes written to it since its last good sync.
 *
 * Built by tests/support/fsync_fault.py; see there for the environment variables:
 *   JET_FSYNC_FAULT_MATCH  substring of the file's path (/proc/self/fd/N) that is watched
 *   JET_FSYNC_FAULT_AT     the Nth sync of a watched file fails (1-based); 0 or unset: none
 *   JET_FSYNC_FAULT_FILE   if set, a file to create when the fault fires (with its path)
 *   JET_FSYNC_FAULT_SUFFIX if set, the path must also end with it (e.g. ".log")
 *   JET_FSYNC_FAULT_CONTROL if set, a file read at every sync instead of MATCH/AT: two
 *                          lines, the match and the call number; absent: no fault. The
 *                          count starts when the file's contents change (arm it any time).
 *   JET_FSYNC_GATE         if set, a file: while it exists, a sync of a watched file waits
 *                          (polling every millisecond, at most 120 s) and creates
 *                          "<gate>.blocked" when it starts waiting (an fsync held open).
 * Every sync records the file's size when it succeeds (watched or not: a fault armed later
 * knows it); the failing one truncates the file to the size at its last good sync (0 if
 * none was seen since the file was opened) first.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FDS 65536

static off_t synced_size[MAX_FDS];
static ino_t synced_ino[MAX_FDS];
static unsigned char seen[MAX_FDS];
static long calls;

static char control_text[4200];
static long control_at;
static char control_match[4200];

/* The match and call number in force: from the control file if one is named. */
static const char *current(long *at) {
    const char *control = getenv("JET_FSYNC_FAULT_CONTROL");
    const char *at_text;
    if (control != NULL && *control != 0) {
        char text[sizeof control_text];
        size_t n = 0;
        FILE *f = fopen(control, "r");
        if (f == NULL) return NULL;
        n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        if (strcmp(text, control_text) != 0) { /* re-armed: parse, restart the count */
            char *nl = strchr(text, '\n');
            memcpy(control_text, text, n + 1);
            if (nl == NULL) return NULL;
            *nl = 0;
            snprintf(control_match, sizeof control_match, "%s", text);
            control_at = atol(nl + 1);
            __atomic_store_n(&calls, 0, __ATOMIC_SEQ_CST);
        }
        *at = control_at;
        return control_match[0] ? control_match : NULL;
    }
    at_text = getenv("JET_FSYNC_FAULT_AT");
    *at = at_text ? atol(at_text) : 0;
    return getenv("JET_FSYNC_FAULT_MATCH");
}

static int watched(int fd, const char *match, char *path, size_t size) {
    const char *suffix = getenv("JET_FSYNC_FAULT_SUFFIX");
    char link[64];
    ssize_t n;
    size_t len, slen;
    if (match == NULL || *match == 0 || fd < 0 || fd >= MAX_FDS) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, size - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    if (strstr(path, match) == NULL) return 0;
    if (suffix == NULL || *suffix == 0) return 1;
    len = (size_t)n;
    slen = strlen(suffix);
    return len >= slen && strcmp(path + len - slen, suffix) == 0;
}

static void wait_at_gate(void) {
    const char *gate = getenv("JET_FSYNC_GATE");
    char blocked[4200];
    struct stat st;
    int waited;
    if (gate == NULL || *gate == 0 || stat(gate, &st) != 0) return;
    snprintf(blocked, sizeof blocked, "%s.blocked", gate);
    {
        FILE *f = fopen(blocked, "w");
        if (f != NULL) fclose(f);
    }
    for (waited = 0; waited < 120000 && stat(gate, &st) == 0; waited++) usleep(1000);
}

/* A sync that succeeds records the file's size (and inode: a reused descriptor of
 * another file does not count), watched or not, so a fault armed later knows it. */
static int recorded_sync(int (*real)(int), int fd) {
    struct stat st;
    int rc;
    if (fd < 0 || fd >= MAX_FDS || fstat(fd, &st) != 0) return real(fd);
    rc = real(fd);
    if (rc == 0) {
        synced_size[fd] = st.st_size;
        synced_ino[fd] = st.st_ino;
        seen[fd] = 1;
    }
    return rc;
}

static int sync_with_fault(int fd, const char *name) {
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
    char path[4096];
    long at = 0, call;
    struct stat st;
    if (!watched(fd, current(&at), path, sizeof path)) return recorded_sync(real, fd);
    wait_at_gate();
    call = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    if (at > 0 && call == at) {
        const char *mark = getenv("JET_FSYNC_FAULT_FILE");
        off_t good = 0;
        if (seen[fd] && fstat(fd, &st) == 0 && st.st_ino == synced_ino[fd]) good = synced_size[fd];
        if (ftruncate(fd, good) != 0) { /* keep going: EIO */ }
        if (mark != NULL && *mark != 0) {
            FILE *f = fopen(mark, "w");
            if (f != NULL) {
                fprintf(f, "%s %lld\n", path, (long long)good);
                fclose(f);
            }
        }
        errno = EIO;
        return -1;
    }
    return recorded_sync(real, fd);
}

int fsync(int fd) { return sync_with_fault(fd, "fsync"); }
int fdatasync(int fd) { return sync_with_fault(fd, "fdatasync"); }
