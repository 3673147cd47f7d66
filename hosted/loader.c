/* loader.c: run independently built PIE executables in their own glibc linker namespaces.
 *
 * Steps for one program (hosted_load, hosted_start):
 *  1. Copy the executable into a memfd with DF_1_PIE cleared in DT_FLAGS_1 (glibc refuses to dlopen
 *     an object flagged PIE), validating every offset of the ELF header, program headers and the
 *     dynamic section against the file size, the tables the dynamic section names against its
 *     loadable segments, and the version tables.  The file is read, never mapped, and the memfd is
 *     sealed: neither can be cut short under the launcher (SIGBUS).
 *     Its initializers (DT_INIT, DT_INIT_ARRAY, DT_PREINIT_ARRAY) are hidden from the dynamic linker,
 *     and $ORIGIN in its library names and search paths is expanded to its own directory.
 *  2. Rehearse the load in a child (the dynamic linker in trace mode, binding every relocation but
 *     running no constructor): a file that crashes the linker is refused there.
 *     dlmopen(LM_ID_NEWLM, "/proc/self/fd/N", RTLD_NOW|RTLD_LOCAL): a fresh namespace with its own
 *     libc copy (own malloc, stdio, errno, exit handlers).  Its libraries' constructors run here.
 *  3. Look up the namespace's own main, exit, _exit, pthread_create/join, environ and
 *     program_invocation_name; set environ and the program name.
 *  4. hosted_start: a new process sharing our address space (clone with CLONE_VM only: its own
 *     PID, descriptor table, signal dispositions, cwd and rlimits) calls the namespace's
 *     pthread_create, which starts prog_thread() in that process; prog_thread runs the executable's
 *     initializers, calls main() with the program's argc/argv/envp and then the namespace's
 *     exit(status), as __libc_start_main would.
 *     Its _exit ends the program's process only (exit_group), and we reap it with waitpid.
 *
 * The libc copy of a secondary namespace never grows the brk heap in glibc >= 2.34 (its sbrk fails
 * with ENOMEM and its malloc falls back to mmap), so several libcs in one process do not fight over
 * the brk; the test checks it.  See docs/HOSTED.md. */
#include "hosted.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#define MAX_EXE_SIZE ((off_t)1 << 32) /* refuse larger files */
#define MAX_HEADERS 4096u               /* program headers, and section headers: refuse more */
/* The executable's initializers are hidden from the dynamic linker under DT_RPAL_HIDDEN + tag, in
 * the OS-specific range (DT_LOOS..DT_HIOS) that glibc's ld.so skips: dlmopen would run them at
 * once, in the launcher, before the copy relocations and environ are set (run_exe_init). */
#define DT_RPAL_HIDDEN 0x60525000
#define LEADER_STACK (64u << 10)      /* the program process's first task: see start_process */
#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif

typedef int (*main_fn)(int, char **, char **);
typedef int (*pthread_create_fn)(unsigned long *, const void *, void *(*)(void *), void *);
typedef int (*pthread_attr_init_fn)(void *);
typedef int (*pthread_attr_setstacksize_fn)(void *, size_t);
typedef int (*cxa_atexit_fn)(void (*)(void *), void *, void *);

enum { ST_LOADED, ST_RUNNING, ST_DONE };

/* A signal action as rt_sigaction takes it. */
struct ksigaction {
    uintptr_t handler;
    unsigned long flags;
    uintptr_t restorer;
    uint64_t mask;
};

/* glibc's signal for changing the ids of every thread (__SIGRTMIN + 1). */
#define GLIBC_SIGSETXID 33

/* Read leases on a loading program's libraries (lease_libraries). */
#define LEASED_MAX 256

struct leases {
    int fd[LEASED_MAX];
    int n;
};

struct hosted_prog {
    char *path;
    void *handle;
    long lmid;
    int argc;
    char **argv;
    char **envp;

    main_fn main;
    void (*ns_exit)(int);
    pthread_create_fn ns_pthread_create;
    pthread_attr_init_fn ns_attr_init, ns_attr_destroy;
    pthread_attr_setstacksize_fn ns_attr_setstacksize;
    cxa_atexit_fn ns_cxa_atexit;
    _Atomic unsigned *ns_nthreads; /* the namespace's libc's count of its threads, or NULL */
    struct link_map *exe_map;
    uint64_t relro_vaddr, relro_memsz; /* the executable's PT_GNU_RELRO */

    unsigned long thread; /* the namespace's pthread_t of the main thread */
    _Atomic int main_tid;
    _Atomic uintptr_t main_fs;
    _Atomic int state;        /* ST_* */
    pid_t pid;                /* its process */
    int status;               /* exit status, or 128 + the signal that ended it */
    int signal;               /* the signal that ended it; 0 when it exited */
    int core_dumped;          /* and the kernel wrote a core dump of it */
    size_t stack_size;        /* of its main thread */
    pid_t launcher;
    /* Between hosted_start and the program's process (start_process). */
    const hosted_spawn *spawn;
    _Atomic int spawned;      /* futex word: 0 while the leader runs on our TCB */
    _Atomic int leader_quiet; /* the leader blocked every signal: main may run */
    int create_rc;
    struct ksigaction setxid; /* the namespace's libc's SIGSETXID action, or handler 0 */
    void *leader_stack;
    /* The code of the namespace's libc, and in it "mov $15, %rax; syscall" (its signal return):
     * 0 when not found (find_libc_sigreturn).  The process returns through it only once the
     * range is published for the program's threads (hosted_libc_code). */
    uintptr_t libc_lo, libc_hi, libc_sigreturn;
    _Atomic int libc_published;
    /* Held from before its load until its process has started: the launcher reads its libraries'
     * pages until then. */
    struct leases leases;
};

/* Programs live as long as the process: their namespace keeps pointers into them (argv, environ,
 * the _exit patch).  The registry keeps them reachable and lets integration code find them. */
static hosted_prog *registry[HOSTED_NNS];
static _Atomic int registry_n;

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- ELF: clear DF_1_PIE */

/* Whether segment ph's file part lies within a file of size bytes: the linker maps a loadable
 * one from there, and a part past the end faults (SIGBUS) when touched. */
static int phdr_in_file(const Elf64_Phdr *ph, uint64_t size) {
    return ph->p_offset <= size && ph->p_filesz <= size - ph->p_offset;
}

/* The file bytes at vaddr..vaddr+len of a mapped segment, or NULL. */
static const unsigned char *at_vaddr(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh,
                                     uint64_t vaddr, uint64_t len) {
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, buf + eh->e_phoff + (size_t)i * sizeof ph, sizeof ph);
        if (ph.p_type != PT_LOAD || vaddr < ph.p_vaddr || vaddr - ph.p_vaddr > ph.p_filesz ||
            len > ph.p_filesz - (vaddr - ph.p_vaddr) || !phdr_in_file(&ph, size))
            continue;
        return buf + ph.p_offset + (vaddr - ph.p_vaddr);
    }
    return NULL;
}

/* How many entries the dynamic symbol table has (from DT_HASH's nchain, else by walking
 * DT_GNU_HASH's last chain); 0 where it cannot be told. */
static uint64_t dynsym_count(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh, uint64_t hash,
                             uint64_t gnu_hash) {
    uint64_t nsyms = 0;
    const unsigned char *t;
    uint32_t w[4];
    if (hash && (t = at_vaddr(buf, size, eh, hash, 8))) {
        memcpy(w, t, 8);
        nsyms = w[1]; /* nchain */
    } else if (gnu_hash && (t = at_vaddr(buf, size, eh, gnu_hash, 16))) {
        memcpy(w, t, 16); /* nbuckets, symoffset, bloom words, bloom shift */
        uint64_t nb = w[0], off = w[1], head = 16 + (uint64_t)w[2] * 8;
        const unsigned char *b = at_vaddr(buf, size, eh, gnu_hash + head, nb * 4);
        if (!b || nb > (1u << 24)) return 0;
        uint32_t last = 0, v;
        for (uint64_t i = 0; i < nb; i++) {
            memcpy(&v, b + i * 4, 4);
            if (v > last) last = v;
        }
        if (last >= off) { /* walk the last chain to its end */
            const unsigned char *c;
            do {
                c = at_vaddr(buf, size, eh, gnu_hash + head + nb * 4 + (uint64_t)(last - off) * 4, 4);
                if (!c) return 0;
                memcpy(&v, c, 4);
                last++;
            } while (!(v & 1) && last < (1u << 24));
        }
        nsyms = last;
    }
    return nsyms > (1u << 24) ? 0 : nsyms;
}

/* Does the dynamic section have an entry tag?  Its value (the last, as the linker takes it) in
 * *val. */
static int dyn_find(const unsigned char *dynp, size_t ndyn, int64_t tag, uint64_t *val) {
    Elf64_Dyn d;
    int found = 0;
    for (size_t i = 0; i < ndyn && (memcpy(&d, dynp + i * sizeof d, sizeof d), d.d_tag != DT_NULL); i++)
        if (d.d_tag == tag) {
            *val = d.d_un.d_val;
            found = 1;
        }
    return found;
}

/* The value of the dynamic section's entry tag, or dflt. */
static uint64_t dyn_value(const unsigned char *dynp, size_t ndyn, int64_t tag, uint64_t dflt) {
    uint64_t v = dflt;
    dyn_find(dynp, ndyn, tag, &v);
    return v;
}

/* Is [addr, addr + len) inside one loadable segment's memory (with flags, where given)? */
static int in_segment_with(const unsigned char *buf, const Elf64_Ehdr *eh, uint64_t addr, uint64_t len,
                           uint32_t flags) {
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, buf + eh->e_phoff + (size_t)i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_LOAD && (ph.p_flags & flags) == flags && addr >= ph.p_vaddr &&
            addr - ph.p_vaddr <= ph.p_memsz && len <= ph.p_memsz - (addr - ph.p_vaddr))
            return 1;
    }
    return 0;
}

static int in_segment(const unsigned char *buf, const Elf64_Ehdr *eh, uint64_t addr, uint64_t len) {
    return in_segment_with(buf, eh, addr, len, 0);
}

/*
 * What is wrong with the executable's relocations and indirect functions, or NULL.  The dynamic
 * linker writes where each relocation says, looks up the symbol it names by index with no bound,
 * and calls the resolver of an indirect function (an IRELATIVE relocation's addend, an
 * STT_GNU_IFUNC symbol's value) while it loads: in the launcher.  The trace-mode rehearsal calls
 * no resolver.
 */
#define RELOCS_MAX (1u << 24)
static const char *relocs_damaged(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh,
                                  const unsigned char *dynp, size_t ndyn, uint64_t symtab, uint64_t nsyms) {
    const struct { uint64_t addr, size; } tables[2] = {
        { dyn_value(dynp, ndyn, DT_RELA, 0), dyn_value(dynp, ndyn, DT_RELASZ, 0) },
        { dyn_value(dynp, ndyn, DT_PLTREL, DT_RELA) == DT_RELA ? dyn_value(dynp, ndyn, DT_JMPREL, 0) : 0,
          dyn_value(dynp, ndyn, DT_PLTRELSZ, 0) },
    };
    for (int t = 0; t < 2; t++) {
        if (!tables[t].addr || !tables[t].size) continue;
        uint64_t n = tables[t].size / sizeof(Elf64_Rela);
        const unsigned char *p = n <= RELOCS_MAX ? at_vaddr(buf, size, eh, tables[t].addr, n * sizeof(Elf64_Rela)) : NULL;
        if (!p) return "its relocations are outside the file";
        for (uint64_t i = 0; i < n; i++) {
            Elf64_Rela r;
            memcpy(&r, p + i * sizeof r, sizeof r);
            uint32_t type = ELF64_R_TYPE(r.r_info);
            uint64_t sym = ELF64_R_SYM(r.r_info);
            if (type == R_X86_64_NONE) continue;
            if (sym && nsyms && sym >= nsyms) return "a relocation names a symbol past the symbol table";
            if (!in_segment(buf, eh, r.r_offset, 8)) return "a relocation writes outside its segments";
            if (type == R_X86_64_IRELATIVE && !in_segment_with(buf, eh, (uint64_t)r.r_addend, 1, PF_X))
                return "an indirect function's resolver (IRELATIVE) is outside its code";
        }
    }
    const unsigned char *syms = nsyms ? at_vaddr(buf, size, eh, symtab, nsyms * sizeof(Elf64_Sym)) : NULL;
    for (uint64_t i = 0; syms && i < nsyms; i++) {
        Elf64_Sym st;
        memcpy(&st, syms + i * sizeof st, sizeof st);
        if (ELF64_ST_TYPE(st.st_info) == STT_GNU_IFUNC && st.st_shndx != SHN_UNDEF &&
            !in_segment_with(buf, eh, st.st_value, 1, PF_X))
            return "an indirect function's resolver (STT_GNU_IFUNC) is outside its code";
    }
    return NULL;
}

/* The NUL-terminated string at offset off of the string table str (strsz bytes), or NULL. */
static const char *str_at(const char *str, uint64_t strsz, uint64_t off) {
    return str && off < strsz && memchr(str + off, 0, strsz - off) ? str + off : NULL;
}

/*
 * What is wrong with the version tables, or NULL.  The dynamic linker walks DT_VERNEED's and
 * DT_VERDEF's entries by their next offsets until one is 0, reads their names, asserts that each
 * library a version is needed from is a DT_NEEDED one, and indexes an array as long as the highest
 * version index by every DT_VERSYM entry: none of it bounded by what the file holds.
 */
#define VERSION_ENTRIES_MAX 4096u
static const char *versions_damaged(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh,
                                    const unsigned char *dynp, size_t ndyn, uint64_t strtab,
                                    uint64_t strsz, uint64_t nsyms) {
    uint64_t verneed = dyn_value(dynp, ndyn, DT_VERNEED, 0), verdef = dyn_value(dynp, ndyn, DT_VERDEF, 0);
    uint64_t versym = dyn_value(dynp, ndyn, DT_VERSYM, 0), ndx_high = 0;
    Elf64_Dyn d;
    if (!verneed && !verdef) return NULL;
    const char *str = (const char *)at_vaddr(buf, size, eh, strtab, strsz);
    if (!str) return "its string table is outside the file";
    unsigned budget = VERSION_ENTRIES_MAX;
    for (uint64_t at = verneed; at; budget--) {
        Elf64_Verneed vn;
        const unsigned char *p = at_vaddr(buf, size, eh, at, sizeof vn);
        if (!p || !budget) return "a needed-version entry (DT_VERNEED) is outside the file";
        memcpy(&vn, p, sizeof vn);
        const char *file = str_at(str, strsz, vn.vn_file);
        if (!file) return "a needed-version entry names no string";
        int needed = 0;
        for (size_t i = 0; i < ndyn && (memcpy(&d, dynp + i * sizeof d, sizeof d), d.d_tag != DT_NULL); i++) {
            const char *name = d.d_tag == DT_NEEDED ? str_at(str, strsz, d.d_un.d_val) : NULL;
            if (name && !strcmp(name, file)) needed = 1;
        }
        if (!needed) return "versions are needed from a library it does not need (DT_NEEDED)";
        for (uint64_t a = at + vn.vn_aux;; budget--) {
            Elf64_Vernaux va;
            if (!budget || !(p = at_vaddr(buf, size, eh, a, sizeof va)))
                return "a needed-version entry (DT_VERNEED) is outside the file";
            memcpy(&va, p, sizeof va);
            if (!str_at(str, strsz, va.vna_name)) return "a needed version names no string";
            if ((va.vna_other & 0x7fff) > ndx_high) ndx_high = va.vna_other & 0x7fff;
            if (!va.vna_next) break;
            a += va.vna_next;
        }
        at = vn.vn_next ? at + vn.vn_next : 0;
    }
    for (uint64_t at = verdef; at; budget--) {
        Elf64_Verdef vd;
        Elf64_Verdaux vda;
        const unsigned char *p = at_vaddr(buf, size, eh, at, sizeof vd);
        if (!p || !budget) return "a version definition (DT_VERDEF) is outside the file";
        memcpy(&vd, p, sizeof vd);
        if (!(p = at_vaddr(buf, size, eh, at + vd.vd_aux, sizeof vda)))
            return "a version definition (DT_VERDEF) is outside the file";
        memcpy(&vda, p, sizeof vda);
        if (!str_at(str, strsz, vda.vda_name)) return "a version definition names no string";
        if ((vd.vd_ndx & 0x7fff) > ndx_high) ndx_high = vd.vd_ndx & 0x7fff;
        at = vd.vd_next ? at + vd.vd_next : 0;
    }
    if (versym && nsyms) {
        const unsigned char *v = at_vaddr(buf, size, eh, versym, nsyms * 2);
        if (!v) return "its symbol versions (DT_VERSYM) are outside the file";
        for (uint64_t i = 0; i < nsyms; i++) {
            uint16_t x;
            memcpy(&x, v + i * 2, 2);
            if ((x & 0x7fff) > (ndx_high > 1 ? ndx_high : 1)) return "a symbol's version index is out of range";
        }
    }
    return NULL;
}

/* 1 when the dynamic symbol table defines a global or weak function main of default visibility:
 * what dlsym finds.  Checked before dlmopen, whose namespace could never be given back. */
static int exports_main(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh, uint64_t symtab,
                        uint64_t strtab, uint64_t strsz, uint64_t hash, uint64_t gnu_hash) {
    uint64_t nsyms = dynsym_count(buf, size, eh, hash, gnu_hash);
    const unsigned char *t;
    if (!nsyms || !(t = at_vaddr(buf, size, eh, symtab, nsyms * sizeof(Elf64_Sym))))
        return 0;
    const char *str = (const char *)at_vaddr(buf, size, eh, strtab, strsz);
    if (!str) return 0;
    for (uint64_t i = 1; i < nsyms; i++) {
        Elf64_Sym sym;
        memcpy(&sym, t + i * sizeof sym, sizeof sym);
        int bind = ELF64_ST_BIND(sym.st_info);
        if (sym.st_name < strsz && strsz - sym.st_name >= 5 && !memcmp(str + sym.st_name, "main", 5) &&
            sym.st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym.st_info) == STT_FUNC &&
            (bind == STB_GLOBAL || bind == STB_WEAK) && ELF64_ST_VISIBILITY(sym.st_other) == STV_DEFAULT)
            return 1;
    }
    return 0;
}

/* The names of the thread-local variables the executable defines and exports (as -rdynamic does
 * for every global one), each NUL-terminated, then an empty one; NULL when there are none (or no
 * memory: the check they serve is then skipped). */
static char *exported_tls(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh, uint64_t symtab,
                          uint64_t strtab, uint64_t strsz, uint64_t hash, uint64_t gnu_hash) {
    uint64_t nsyms = dynsym_count(buf, size, eh, hash, gnu_hash);
    const unsigned char *t;
    const char *str = (const char *)at_vaddr(buf, size, eh, strtab, strsz);
    if (!nsyms || !str || !(t = at_vaddr(buf, size, eh, symtab, nsyms * sizeof(Elf64_Sym)))) return NULL;
    char *names = NULL;
    size_t len = 0;
    for (uint64_t i = 1; i < nsyms; i++) {
        Elf64_Sym sym;
        memcpy(&sym, t + i * sizeof sym, sizeof sym);
        if (ELF64_ST_TYPE(sym.st_info) != STT_TLS || sym.st_shndx == SHN_UNDEF || sym.st_name >= strsz ||
            ELF64_ST_BIND(sym.st_info) == STB_LOCAL)
            continue;
        size_t n = strnlen(str + sym.st_name, strsz - sym.st_name);
        char *more = realloc(names, len + n + 2);
        if (!more) {
            free(names);
            return NULL;
        }
        names = more;
        memcpy(names + len, str + sym.st_name, n);
        names[len + n] = 0;
        len += n + 1;
        names[len] = 0;
    }
    return names;
}

/* What execve(2) would refuse, or grant that hosting cannot: execute permission for our effective
 * ids (faccessat2 on the open file, which also says EACCES on a noexec mount; the mode bits where
 * the kernel lacks it), a file system mounted noexec, and set-user-ID, set-group-ID or file
 * capabilities.  A hosted program shares the launcher's address space and credentials, so a
 * privilege that exec would give it cannot be given: such a program is refused rather than run
 * without it (it would fail in ways far from the cause), except where exec would change nothing:
 * the set-ID is ours already, or the mount is nosuid (exec ignores set-ID bits and capabilities
 * there too). */
static int exec_permitted(int fd, const struct stat *st, const char *path, char *err, size_t errlen) {
    struct statvfs vfs;
    int have_vfs = fstatvfs(fd, &vfs) == 0;
    if (have_vfs && (vfs.f_flag & ST_NOEXEC)) {
        seterr(err, errlen, "%s: on a file system mounted noexec: exec would refuse it (EACCES)", path);
        return -1;
    }
    long r = syscall(SYS_faccessat2, fd, "", X_OK, AT_EACCESS | AT_EMPTY_PATH);
    int x_ok;
    if (r == 0) {
        x_ok = 1;
    } else if (errno == ENOSYS || errno == EINVAL || errno == EPERM) {
        /* No faccessat2 (Linux < 5.8, or a seccomp filter): the mode bits, as the kernel reads
         * them without ACLs.  The superuser may run a file with any execute bit. */
        uid_t euid = geteuid();
        mode_t bit = S_IXOTH;
        if (euid == 0) bit = S_IXUSR | S_IXGRP | S_IXOTH;
        else if (st->st_uid == euid) bit = S_IXUSR;
        else if (st->st_gid == getegid()) bit = S_IXGRP;
        else {
            gid_t groups[NGROUPS_MAX];
            int n = getgroups(NGROUPS_MAX, groups);
            for (int i = 0; i < n; i++)
                if (groups[i] == st->st_gid) bit = S_IXGRP;
        }
        x_ok = (st->st_mode & bit) != 0;
    } else {
        x_ok = 0;
    }
    if (!x_ok) {
        seterr(err, errlen, "%s: no permission to execute it (mode %04o): exec would refuse it (EACCES)",
               path, (unsigned)(st->st_mode & 07777));
        return -1;
    }
    if (have_vfs && (vfs.f_flag & ST_NOSUID)) return 0;
    if ((st->st_mode & S_ISUID) && st->st_uid != geteuid()) {
        seterr(err, errlen,
               "%s: set-user-ID program (owner uid %u): exec would run it with that user's privilege, "
               "hosted it would run with yours (uid %u); it is not hosted, run it directly",
               path, (unsigned)st->st_uid, (unsigned)geteuid());
        return -1;
    }
    /* Set-group-ID without group execute is a locking mark, not a privilege. */
    if ((st->st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) && st->st_gid != getegid()) {
        seterr(err, errlen,
               "%s: set-group-ID program (group %u): exec would run it with that group's privilege, "
               "hosted it would run with yours (gid %u); it is not hosted, run it directly",
               path, (unsigned)st->st_gid, (unsigned)getegid());
        return -1;
    }
    if (geteuid() != 0 && fgetxattr(fd, "security.capability", NULL, 0) > 0) {
        seterr(err, errlen,
               "%s: has file capabilities: exec would grant them, hosted it would run without; it is "
               "not hosted, run it directly", path);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- ELF: $ORIGIN */

/* Length of the $ORIGIN or ${ORIGIN} token at s ('$' included), or 0: the dynamic linker's rule,
 * where $ORIGIN followed by a letter, digit or '_' names something else. */
static size_t origin_token(const char *s) {
    if (s[0] != '$') return 0;
    if (!strncmp(s + 1, "{ORIGIN}", 8)) return 9;
    if (strncmp(s + 1, "ORIGIN", 6)) return 0;
    char c = s[7];
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') return 0;
    return 7;
}

/* Room for a string the dynamic linker will read: zero bytes at file offsets [off, lim) that are
 * mapped (the tail of a readable segment's last page, past its file contents, with no zero-filled
 * memory after them) and belong to nothing else in the file (no segment, section, or header
 * table).  Consumed from the front as strings are placed. */
struct str_room {
    uint64_t off, lim, vaddr; /* vaddr: where off is mapped */
};

/* Whether a + b + c overflows: sums a crafted file could make wrap. */
static int wraps(uint64_t a, uint64_t b, uint64_t c) {
    return b > UINT64_MAX - c || a > UINT64_MAX - b - c;
}

static int overlaps(uint64_t a, uint64_t a_end, uint64_t b, uint64_t b_len) {
    return b_len && b < a_end && a < b + b_len;
}

static int find_rooms(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh,
                      struct str_room *rooms, int max) {
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    Elf64_Shdr sh;
    int n = 0;
    if (eh->e_shnum && (eh->e_shentsize != sizeof sh || eh->e_shoff > size ||
                        (size - eh->e_shoff) / sizeof sh < eh->e_shnum))
        return 0; /* a section table we cannot read: nothing is known free */
    for (unsigned i = 0; i < eh->e_phnum && n < max; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, buf + eh->e_phoff + (size_t)i * sizeof ph, sizeof ph);
        if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_R) || !ph.p_filesz || ph.p_memsz != ph.p_filesz ||
            !phdr_in_file(&ph, size) || ph.p_offset % page != ph.p_vaddr % page)
            continue;
        if (wraps(ph.p_vaddr, ph.p_memsz, page)) continue; /* no room is trusted there */
        uint64_t off = ph.p_offset + ph.p_filesz;
        uint64_t lim = (off + page - 1) / page * page;
        if (lim > size) lim = size;
        if (off >= lim) continue;
        int clash = overlaps(off, lim, 0, sizeof *eh) ||
                    overlaps(off, lim, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof ph) ||
                    overlaps(off, lim, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof sh);
        /* Nor mapped over by another segment sharing the page. */
        uint64_t va = ph.p_vaddr + ph.p_filesz, va_lim = va + (lim - off);
        for (unsigned j = 0; j < eh->e_phnum && !clash; j++) {
            Elf64_Phdr q;
            memcpy(&q, buf + eh->e_phoff + (size_t)j * sizeof q, sizeof q);
            if (j == i) continue;
            if (wraps(q.p_vaddr, q.p_memsz, page) || wraps(q.p_offset, q.p_filesz, 0)) {
                clash = 1; /* sums that wrap: nothing near it is known free */
                break;
            }
            uint64_t q_lo = q.p_vaddr / page * page, q_hi = (q.p_vaddr + q.p_memsz + page - 1) / page * page;
            clash = overlaps(off, lim, q.p_offset, q.p_filesz) ||
                    (q.p_type == PT_LOAD && q.p_memsz && va < q_hi && q_lo < va_lim);
        }
        for (unsigned j = 0; j < eh->e_shnum && !clash; j++) {
            memcpy(&sh, buf + eh->e_shoff + (size_t)j * sizeof sh, sizeof sh);
            clash = sh.sh_type != SHT_NOBITS && (wraps(sh.sh_offset, sh.sh_size, 0) ||
                                                 overlaps(off, lim, sh.sh_offset, sh.sh_size));
        }
        for (uint64_t k = off; k < lim && !clash; k++) clash = buf[k] != 0;
        if (!clash) rooms[n++] = (struct str_room){off, lim, va};
    }
    return n;
}

/* The dynamic linker expands $ORIGIN to the directory of the object as it was named, and for the
 * memfd copy that is /proc/self/fd, where no library is.  So every DT_NEEDED, DT_RPATH and
 * DT_RUNPATH string with $ORIGIN in it is written out again with the program's own directory
 * (that of the file we opened, symlinks resolved, as exec's $ORIGIN is) into room the copy maps
 * anyway, and its entry pointed there; the strings themselves cannot grow in place.  Returns how
 * many such strings found no room (they keep $ORIGIN). */
static int expand_origin(unsigned char *buf, size_t size, const Elf64_Ehdr *eh, int fd,
                         unsigned char *dyn, size_t ndyn, uint64_t strtab, uint64_t strsz) {
    struct str_room rooms[16];
    int nrooms = -1, kept = 0;
    char dir[PATH_MAX];
    for (size_t i = 0; i < ndyn; i++) {
        Elf64_Dyn d;
        memcpy(&d, dyn + i * sizeof d, sizeof d);
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag != DT_NEEDED && d.d_tag != DT_RPATH && d.d_tag != DT_RUNPATH) continue;
        const char *str = (const char *)at_vaddr(buf, size, eh, strtab, strsz);
        if (!str || d.d_un.d_val >= strsz) continue;
        const char *s = str + d.d_un.d_val;
        size_t slen = strnlen(s, strsz - d.d_un.d_val), ntok = 0;
        if (slen == strsz - d.d_un.d_val) continue; /* unterminated: the linker's to refuse */
        for (size_t k = 0; k < slen; k++)
            if (origin_token(s + k)) ntok++;
        if (!ntok) continue;
        if (nrooms < 0) {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, dir, sizeof dir - 1);
            /* n == sizeof dir - 1 may be a name cut short: keep $ORIGIN (the loader's error then
             * gives the LD_LIBRARY_PATH advice) rather than write a wrong directory in. */
            char *slash = n > 0 && (size_t)n < sizeof dir - 1 && dir[0] == '/' ? memrchr(dir, '/', (size_t)n) : NULL;
            if (!slash) return 1;
            *(slash == dir ? slash + 1 : slash) = '\0';
            nrooms = find_rooms(buf, size, eh, rooms, 16);
        }
        /* The dynamic linker splits a search path at ':' before it expands each element, and
         * reads '$' as the start of a token: a directory with either, written in, would be read
         * as something else. */
        if (strchr(dir, '$') || (d.d_tag != DT_NEEDED && strchr(dir, ':'))) {
            kept++;
            continue;
        }
        size_t dlen = strlen(dir), need = slen + 1 + ntok * dlen;
        struct str_room *r = NULL;
        for (int k = 0; k < nrooms && !r; k++)
            if (rooms[k].lim - rooms[k].off >= need && rooms[k].vaddr >= strtab) r = &rooms[k];
        if (!r) {
            kept++;
            continue;
        }
        char *out = (char *)buf + r->off;
        for (size_t k = 0; k < slen;) {
            size_t t = origin_token(s + k);
            if (t) {
                memcpy(out, dir, dlen);
                out += dlen;
                k += t;
            } else {
                *out++ = s[k++];
            }
        }
        *out++ = '\0';
        d.d_un.d_val = r->vaddr - strtab;
        memcpy(dyn + i * sizeof d, &d, sizeof d);
        r->vaddr += (uint64_t)(out - ((char *)buf + r->off));
        r->off = (uint64_t)(out - (char *)buf);
    }
    return kept;
}

/* ---------------------------------------------------------------- an executable's own TLS */

/* An executable addresses its own thread-locals at fixed offsets below the thread pointer (the
 * linker resolves them, local-exec: no relocation), in [tp - S, tp) where S is its PT_TLS size
 * rounded up to its alignment: the block that exec gives TLS module 1, the executable.  Hosted,
 * module 1 is the launcher's executable, and glibc places its block right below the thread pointer
 * of every thread of every namespace, zeroed as each thread starts.  So it is made large enough to
 * hold a program's: the launcher's code never touches it on a program's thread. */
__attribute__((used, aligned(64))) __thread unsigned char hosted_exe_tls_room[HOSTED_EXE_TLS_ROOM];

static int module1_tls(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    if (info->dlpi_tls_modid != 1) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) *(const ElfW(Phdr) **)data = &info->dlpi_phdr[i];
    return 1;
}

/* The bytes of module 1's block that lie right below the thread pointer and start at zero: its
 * zero-initialized part, when nothing pads it (glibc puts module 1 at tp - its size rounded up to
 * its alignment, and may fill that padding with another module). */
static uint64_t exe_tls_room(void) {
    const ElfW(Phdr) *ph = NULL;
    dl_iterate_phdr(module1_tls, &ph);
    if (!ph || !ph->p_align || ph->p_memsz % ph->p_align) return 0;
    return ph->p_memsz - ph->p_filesz;
}

/* 0 when the executable's own thread-locals fit what exe_tls_room() sets aside, with no initial
 * value the thread pointer's block would not have; else -1 with a message. */
static int check_exe_tls(const unsigned char *buf, size_t size, const Elf64_Ehdr *eh,
                         const char *path, char *err, size_t errlen) {
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, buf + eh->e_phoff + (size_t)i * sizeof ph, sizeof ph);
        if (ph.p_type != PT_TLS || !ph.p_memsz) continue;
        uint64_t align = ph.p_align ? ph.p_align : 1;
        if (align > 64 || (align & (align - 1)) || ph.p_filesz > ph.p_memsz ||
            ph.p_memsz > (uint64_t)1 << 40) {
            seterr(err, errlen, "%s: its thread-local storage (PT_TLS: %llu bytes, alignment %llu) "
                   "cannot be hosted (at most alignment 64)", path,
                   (unsigned long long)ph.p_memsz, (unsigned long long)align);
            return -1;
        }
        uint64_t need = (ph.p_memsz + align - 1) & ~(align - 1), room = exe_tls_room();
        if (need > room) {
            seterr(err, errlen, "%s: its own thread-local variables take %llu bytes, more than the "
                   "%llu that hosted mode sets aside for an executable's; move the large ones into "
                   "a shared library, or allocate them",
                   path, (unsigned long long)need, (unsigned long long)room);
            return -1;
        }
        const unsigned char *img = ph.p_filesz ? at_vaddr(buf, size, eh, ph.p_vaddr, ph.p_filesz) : NULL;
        for (uint64_t k = 0; img && k < ph.p_filesz; k++)
            if (img[k]) {
                seterr(err, errlen, "%s: its own thread-local variables have initial values "
                       "(%llu bytes of .tdata), which hosted they would not get: every thread "
                       "would see them zero; initialize them at run time, or move them into a "
                       "shared library, whose thread-locals get theirs",
                       path, (unsigned long long)ph.p_filesz);
                return -1;
            }
    }
    return 0;
}

/*
 * The tag of the first table the dynamic section places outside the loadable segments, or -1.
 * The dynamic linker reads each where the program is mapped plus its address, and one outside
 * reads or writes whatever the launcher has mapped there.  A table's size, where a tag gives it,
 * must fit too.
 */
static int64_t dyn_table_outside(const unsigned char *buf, const Elf64_Ehdr *eh, const unsigned char *dynp,
                                 size_t ndyn) {
    static const struct { int64_t tag, size_tag; } tables[] = {
        { DT_STRTAB, DT_STRSZ },   { DT_SYMTAB, 0 },         { DT_RELA, DT_RELASZ },
        { DT_REL, DT_RELSZ },      { DT_JMPREL, DT_PLTRELSZ }, { DT_RELR, DT_RELRSZ },
        { DT_INIT_ARRAY, DT_INIT_ARRAYSZ }, { DT_FINI_ARRAY, DT_FINI_ARRAYSZ },
        { DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ }, { DT_HASH, 0 }, { DT_GNU_HASH, 0 },
        { DT_VERSYM, 0 },          { DT_VERNEED, 0 },        { DT_VERDEF, 0 },
        { DT_PLTGOT, 0 },          { DT_INIT, 0 },           { DT_FINI, 0 },
    };
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        uint64_t addr, len = tables[t].size_tag ? dyn_value(dynp, ndyn, tables[t].size_tag, 0) : 0;
        if (dyn_find(dynp, ndyn, tables[t].tag, &addr) && !in_segment(buf, eh, addr, len)) return tables[t].tag;
    }
    return -1;
}

int hosted_depie(const char *path, struct hosted_copy *info, char *err, size_t errlen) {
    int fd = -1, mfd = -1;
    unsigned char *buf = MAP_FAILED;
    size_t size = 0;
    if (info) *info = (struct hosted_copy){0};

    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer (a device, for whatever its
     * driver does), and the launcher loads on its only loop; anything but a regular file is
     * refused below. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (info) {
        /* The name of the file this descriptor holds (symlinks resolved at open): the one the
         * program's copy is made from, whatever happens to path while it loads. */
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, info->file, sizeof info->file - 1);
        if (n <= 0 || (size_t)n >= sizeof info->file - 1 || info->file[0] != '/') n = 0;
        info->file[n] = 0;
        static const char deleted[] = " (deleted)";
        if ((size_t)n > sizeof deleted - 1 && !strcmp(info->file + n - (sizeof deleted - 1), deleted))
            info->file[n - (sizeof deleted - 1)] = 0;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        seterr(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    if (exec_permitted(fd, &st, path, err, errlen) < 0) goto fail;
    /* A script, which execve(2) would hand to the interpreter of its #! line. */
    char line[256];
    ssize_t got = pread(fd, line, sizeof line - 1, 0);
    if (got > 2 && line[0] == '#' && line[1] == '!') {
        line[got] = 0;
        char *interp = line + 2 + strspn(line + 2, " \t");
        interp[strcspn(interp, "\n")] = 0;
        seterr(err, errlen,
               "%s: a script for %s: hosted mode loads ELF programs; host the interpreter with the "
               "script as its argument (%s %s ...), where the interpreter is a PIE that exports main",
               path, interp, interp, path);
        goto fail;
    }
    if (st.st_size < (off_t)sizeof(Elf64_Ehdr) || st.st_size > MAX_EXE_SIZE) {
        seterr(err, errlen, "%s: not an ELF executable (size %lld)", path, (long long)st.st_size);
        goto fail;
    }
    size = (size_t)st.st_size;
    /* Read into memory of our own, not mapped from the file: whoever may write the file could
     * truncate it while we parse, and a page of a mapping past the end of a file raises SIGBUS,
     * which would end the launcher and every program it hosts. */
    buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        seterr(err, errlen, "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    for (size_t off = 0; off < size;) {
        ssize_t r = pread(fd, buf + off, size - off, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            seterr(err, errlen, "%s: %s while reading it (%zu of %zu bytes read)", path,
                   r < 0 ? strerror(errno) : "it became shorter", off, size);
            goto fail;
        }
        off += (size_t)r;
    }

    Elf64_Ehdr eh;
    memcpy(&eh, buf, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_X86_64) {
        seterr(err, errlen, "%s: not an x86-64 ELF64 file", path);
        goto fail;
    }
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum == PN_XNUM ||
        eh.e_phoff > size || (size - eh.e_phoff) / sizeof(Elf64_Phdr) < eh.e_phnum) {
        seterr(err, errlen, "%s: bad program header table", path);
        goto fail;
    }
    /* find_rooms compares every header with every other: a crafted count would hold the launcher's
     * only loop for minutes.  Linkers write a dozen program headers and some tens of sections. */
    if (eh.e_phnum > MAX_HEADERS || eh.e_shnum > MAX_HEADERS) {
        seterr(err, errlen, "%s: %u program headers and %u section headers: more than the %u of "
               "either that hosted mode reads", path, eh.e_phnum, eh.e_shnum, MAX_HEADERS);
        goto fail;
    }
    const Elf64_Phdr *dyn_ph = NULL;
    int interp = 0;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, buf + eh.e_phoff + (size_t)i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_INTERP) interp = 1;
        /* The linker maps it from the file and zeroes the rest of its last page: past the end of
         * the copy, that is a SIGBUS in the launcher. */
        if (ph.p_type == PT_LOAD && (!phdr_in_file(&ph, size) || ph.p_filesz > ph.p_memsz)) {
            seterr(err, errlen, "%s: the file is damaged: a loadable segment reaches past its end", path);
            goto fail;
        }
        if (ph.p_type == PT_GNU_RELRO && info) {
            info->relro_vaddr = ph.p_vaddr;
            info->relro_memsz = ph.p_memsz;
        }
        if (ph.p_type == PT_DYNAMIC) {
            if (dyn_ph) {
                seterr(err, errlen, "%s: two PT_DYNAMIC headers", path);
                goto fail;
            }
            dyn_ph = (const Elf64_Phdr *)(buf + eh.e_phoff + (size_t)i * sizeof ph);
        }
    }
    if (eh.e_type == ET_EXEC && !interp && !dyn_ph) {
        seterr(err, errlen, "%s: statically linked: a hosted program is linked dynamically (with -fPIE -pie)",
               path);
        goto fail;
    }
    if (eh.e_type != ET_DYN) {
        seterr(err, errlen,
               "%s: not a position-independent executable (ELF type %u); build it with -fPIE -pie",
               path, eh.e_type);
        goto fail;
    }
    if (!dyn_ph) {
        seterr(err, errlen, "%s: no dynamic section (a static executable cannot be hosted)", path);
        goto fail;
    }
    Elf64_Phdr dph;
    memcpy(&dph, dyn_ph, sizeof dph);
    if (!phdr_in_file(&dph, size) || dph.p_offset % 8 != 0) {
        seterr(err, errlen, "%s: PT_DYNAMIC outside the file", path);
        goto fail;
    }
    size_t ndyn = dph.p_filesz / sizeof(Elf64_Dyn);
    /* Before the initializers' tags are hidden below. */
    int64_t outside = dyn_table_outside(buf, &eh, buf + dph.p_offset, ndyn);
    if (outside >= 0) {
        seterr(err, errlen,
               "%s: the file is damaged: its dynamic section places a table (tag %#llx) outside its "
               "loadable segments", path, (unsigned long long)outside);
        goto fail;
    }
    int found_null = 0, needed = 0;
    uint64_t symtab = 0, strtab = 0, strsz = 0, hash = 0, gnu_hash = 0;
    for (size_t i = 0; i < ndyn; i++) {
        unsigned char *ep = buf + dph.p_offset + i * sizeof(Elf64_Dyn);
        Elf64_Dyn d;
        memcpy(&d, ep, sizeof d);
        if (d.d_tag == DT_NULL) {
            found_null = 1;
            break;
        }
        if (d.d_tag == DT_NEEDED) needed = 1;
        if (d.d_tag == DT_SYMTAB) symtab = d.d_un.d_ptr;
        else if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
        else if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
        else if (d.d_tag == DT_HASH) hash = d.d_un.d_ptr;
        else if (d.d_tag == DT_GNU_HASH) gnu_hash = d.d_un.d_ptr;
        if (d.d_tag == DT_FLAGS_1 && (d.d_un.d_val & DF_1_PIE)) {
            if (info) info->was_pie = 1;
            d.d_un.d_val &= ~(Elf64_Xword)DF_1_PIE;
            memcpy(ep, &d, sizeof d);
        }
        if (d.d_tag == DT_INIT || d.d_tag == DT_INIT_ARRAY || d.d_tag == DT_INIT_ARRAYSZ ||
            d.d_tag == DT_PREINIT_ARRAY || d.d_tag == DT_PREINIT_ARRAYSZ) {
            d.d_tag += DT_RPAL_HIDDEN;
            memcpy(ep, &d, sizeof d);
        }
    }
    if (!found_null) {
        seterr(err, errlen, "%s: dynamic section not terminated by DT_NULL", path);
        goto fail;
    }
    /* A static PIE has a dynamic section of its own and no interpreter nor library to load. */
    if (!interp && !needed) {
        seterr(err, errlen, "%s: statically linked: a hosted program is linked dynamically (with -fPIE -pie)",
               path);
        goto fail;
    }
    uint64_t nsyms = dynsym_count(buf, size, &eh, hash, gnu_hash);
    const char *damage = versions_damaged(buf, size, &eh, buf + dph.p_offset, ndyn, strtab, strsz, nsyms);
    if (!damage) damage = relocs_damaged(buf, size, &eh, buf + dph.p_offset, ndyn, symtab, nsyms);
    if (damage) {
        seterr(err, errlen, "%s: the file is damaged: %s", path, damage);
        goto fail;
    }
    if (!exports_main(buf, size, &eh, symtab, strtab, strsz, hash, gnu_hash)) {
        seterr(err, errlen,
               "%s: main is not exported (link the program with -rdynamic, or "
               "-Wl,--export-dynamic-symbol=main)", path);
        goto fail;
    }

    if (check_exe_tls(buf, size, &eh, path, err, errlen) < 0) goto fail;
    if (info) info->tls_names = exported_tls(buf, size, &eh, symtab, strtab, strsz, hash, gnu_hash);

    int kept = expand_origin(buf, size, &eh, fd, buf + dph.p_offset, ndyn, strtab, strsz);
    if (info) info->origin_kept = kept;

    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    mfd = memfd_create(base, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0) {
        seterr(err, errlen, "memfd_create: %s", strerror(errno));
        goto fail;
    }
    for (size_t off = 0; off < size;) {
        ssize_t w = write(mfd, buf + off, size - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            seterr(err, errlen, "writing the memfd copy of %s: %s", path,
                   w < 0 ? strerror(errno) : "short write");
            goto fail;
        }
        off += (size_t)w;
    }
    /* The copy is what the dynamic linker maps, and anyone of our uid can open it while it loads
     * (/proc/PID/fd/N): cut short, it would raise SIGBUS in the launcher; written, it would no
     * longer be the copy checked here. */
    if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        seterr(err, errlen, "sealing the memfd copy of %s: %s", path, strerror(errno));
        goto fail;
    }
    munmap(buf, size);
    close(fd);
    return mfd;

fail:
    if (buf != MAP_FAILED) munmap(buf, size);
    if (fd >= 0) close(fd);
    if (mfd >= 0) close(mfd);
    if (info) {
        free(info->tls_names);
        info->tls_names = NULL;
    }
    return -1;
}

/* ---------------------------------------------------------------- tunables */

#define REEXEC_MARK "RPAL_HOSTED_REEXEC"       /* set by us: "1" */
#define ORIG_TUNABLES "RPAL_HOSTED_ORIG_TUNABLES" /* the GLIBC_TUNABLES value before, if any */

void hosted_reexec_with_tunables(int argc, char **argv) {
    (void)argc;
    const char *t = getenv("GLIBC_TUNABLES");
    if (t && strstr(t, "glibc.rtld.nns")) return; /* already set (by us or the user) */
    if (getenv(REEXEC_MARK)) return;             /* exec'd once already: do not loop */
    long tls = HOSTED_STATIC_TLS_DEFAULT;
    const char *ts = getenv("RPAL_HOSTED_STATIC_TLS");
    if (ts && *ts) tls = strtol(ts, NULL, 0);
    if (tls < 512) tls = 512;
    char val[4096];
    int n = snprintf(val, sizeof val, "%s%sglibc.rtld.nns=%d:glibc.rtld.optional_static_tls=%ld",
                     t ? t : "", t && *t ? ":" : "", HOSTED_NNS, tls);
    if (n < 0 || (size_t)n >= sizeof val) {
        fprintf(stderr, "rpal hosted: GLIBC_TUNABLES too long; not raising the namespace limit\n");
        return;
    }
    if (t) setenv(ORIG_TUNABLES, t, 1);
    setenv("GLIBC_TUNABLES", val, 1);
    setenv(REEXEC_MARK, "1", 1);
    fflush(NULL);
    /* By the binary's own path where it still has one: the kernel names the
     * process after the file it executes, and ps, pgrep and top would list
     * the launcher as "exe". */
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    fprintf(stderr,
            "rpal hosted: re-exec with GLIBC_TUNABLES failed (%s); static TLS will limit the number "
            "of programs (about 11)\n",
            strerror(errno));
    unsetenv(REEXEC_MARK);
}

/* glibc's hard limit is DL_NNS = 16 namespaces (the base one included) whatever the tunables say;
 * glibc.rtld.nns only sizes the static TLS surplus that each namespace's libc needs (without the
 * tunables, glibc 2.36 refuses about the 12th namespace with "cannot allocate memory in static TLS
 * block"). */
static _Atomic int ns_in_use = 1; /* the base namespace */

int hosted_ns_limit(void) { return HOSTED_NNS - ns_in_use; }

/* ---------------------------------------------------------------- the linker's locks */

/*
 * The dynamic linker is one for the whole address space, and so are its locks: a program's thread
 * killed while it holds one (inside dlopen or dlclose, a thread's TLS set-up, dl_iterate_phdr as
 * C++ unwinding calls it) leaves it held by a thread that no longer exists, and every later load,
 * dlopen and unwinding of every program waits for ever.  glibc keeps them, recursive mutexes
 * without a robust owner, side by side in _rtld_global (its private symbol): the load lock, the
 * list lock that dl_iterate_phdr holds, the TLS lock.  They are found by that layout and checked
 * on the list lock, held by us inside a dl_iterate_phdr callback; where either fails, nothing is
 * released.
 */
static const char *const linker_lock_name[3] = { "load lock", "list lock", "TLS lock" };
static pthread_mutex_t *linker_locks;

static int is_recursive_mutex(const unsigned char *p) {
    pthread_mutex_t m;
    memcpy(&m, p, sizeof m);
    return m.__data.__kind == PTHREAD_MUTEX_RECURSIVE_NP && m.__data.__spins == 0 &&
           (unsigned)m.__data.__lock <= 2 && !m.__data.__list.__prev && !m.__data.__list.__next;
}

static int list_lock_held_here(struct dl_phdr_info *info, size_t size, void *data) {
    (void)info;
    (void)size;
    const pthread_mutex_t *m = data;
    return m->__data.__owner == (int)syscall(SYS_gettid) && m->__data.__count >= 1 ? 1 : -1;
}

static int linker_locks_find(void) {
    const ElfW(Sym) *sym = NULL;
    Dl_info info;
    unsigned char *g = dlsym(RTLD_DEFAULT, "_rtld_global");
    if (!g || !dladdr1(g, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym) return -1;
    size_t size = sym->st_size, step = sizeof(pthread_mutex_t);
    for (size_t off = 0; off + 3 * step <= size; off += sizeof(void *)) {
        if (!is_recursive_mutex(g + off) || !is_recursive_mutex(g + off + step) ||
            !is_recursive_mutex(g + off + 2 * step))
            continue;
        pthread_mutex_t *m = (pthread_mutex_t *)(g + off);
        if (dl_iterate_phdr(list_lock_held_here, &m[1]) != 1) return -1;
        linker_locks = m;
        return 0;
    }
    return -1;
}

/* Has thread tid ended?  No such task (kill() asks in our own PID namespace, whatever /proc
 * shows), or a zombie: a program's first task stays one until its launcher reaps it, which /proc
 * tells where it is our namespace's. */
static int thread_gone(int tid) {
    char path[64], buf[256];
    if (kill(tid, 0) < 0 && errno == ESRCH) return 1;
    ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
    if (n <= 0) return 0;
    buf[n] = 0;
    if (atoi(buf) != getpid()) return 0;
    snprintf(path, sizeof path, "/proc/%d/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

static struct rpal_host *linker_watch_host;

static int linker_locks_recover(FILE *f, const char *prefix) {
    int n = 0;
    /* A receiver running in a call takes locks under its own thread's id, on its caller's thread:
     * an owner that looks dead may be alive there.  Looked at again next time. */
    if (linker_watch_host && hosted_host_calls_in_flight(linker_watch_host)) return 0;
    for (int i = 0; linker_locks && i < 3; i++) {
        pthread_mutex_t *m = &linker_locks[i];
        int owner = __atomic_load_n(&m->__data.__owner, __ATOMIC_ACQUIRE);
        if (owner <= 0 || !thread_gone(owner)) continue;
        /* Its owner has ended, so it cannot have let the lock go since: an owner read again as the
         * same is still the holder, not a new one. */
        if (__atomic_load_n(&m->__data.__owner, __ATOMIC_ACQUIRE) != owner) continue;
        m->__data.__owner = 0;
        m->__data.__count = 0;
        if (m->__data.__nusers) m->__data.__nusers--;
        if (__atomic_exchange_n(&m->__data.__lock, 0, __ATOMIC_RELEASE) > 1)
            syscall(SYS_futex, &m->__data.__lock, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        fprintf(f, "%sthe dynamic linker's %s was held by thread %d, which no longer exists (a program "
                   "killed inside dlopen, dlclose, thread creation or unwinding): released, so that "
                   "loads go on; what that thread was changing may be left half done\n",
                prefix, linker_lock_name[i], owner);
        n++;
    }
    return n;
}

static char linker_watch_prefix[128];

/* Not the launcher's main loop: that thread may be the one waiting for the lock. */
static void *linker_watch(void *arg) {
    sigset_t all;
    (void)arg;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the launcher's signals are its main thread's */
    for (;;) {
        struct timespec ts = { HOSTED_LINKER_WATCH_MS / 1000, (HOSTED_LINKER_WATCH_MS % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        linker_locks_recover(stderr, linker_watch_prefix);
    }
    return NULL;
}

int hosted_linker_watch(struct rpal_host *h, const char *prefix) {
    pthread_t t;
    pthread_attr_t a;
    if (linker_locks_find() < 0) return -1;
    linker_watch_host = h;
    snprintf(linker_watch_prefix, sizeof linker_watch_prefix, "%s", prefix);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &a, linker_watch, NULL);
    pthread_attr_destroy(&a);
    return e ? -1 : 0;
}

char **hosted_clean_environ(void) {
    static char **clean;
    if (clean) return clean;
    extern char **environ;
    size_t n = 0;
    while (environ[n]) n++;
    char **v = calloc(n + 2, sizeof *v);
    if (!v) return environ;
    const char *orig = getenv(ORIG_TUNABLES);
    int ours = getenv(REEXEC_MARK) != NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = environ[i];
        if (!strncmp(e, REEXEC_MARK "=", sizeof REEXEC_MARK)) continue;
        if (!strncmp(e, ORIG_TUNABLES "=", sizeof ORIG_TUNABLES)) continue;
        if (ours && !strncmp(e, "GLIBC_TUNABLES=", 15)) {
            if (orig) {
                size_t len = strlen(orig) + 16;
                char *s = malloc(len);
                if (s) {
                    snprintf(s, len, "GLIBC_TUNABLES=%s", orig);
                    v[k++] = s;
                }
            }
            continue;
        }
        v[k++] = (char *)e;
    }
    v[k] = NULL;
    clean = v;
    return clean;
}

/* ---------------------------------------------------------------- raw system calls
 * For the program process's first task, which runs on the launcher thread's TCB (start_process):
 * no errno, no TLS. */

static long raw6(long nr, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#define raw1(nr, a) raw6(nr, (long)(a), 0, 0, 0, 0, 0)
#define raw2(nr, a, b) raw6(nr, (long)(a), (long)(b), 0, 0, 0, 0)
#define raw3(nr, a, b, c) raw6(nr, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define raw4(nr, a, b, c, d) raw6(nr, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* Run the executable's initializers as __libc_start_main does for a main program: DT_PREINIT_ARRAY
 * (ld.so's part in an exec), DT_INIT, then DT_INIT_ARRAY, each with argc, argv and envp.  They run
 * on the program's main thread in its own process, just before main: after the copy relocations
 * and environ are set, with the joiner's descriptors, and an exit() or a crash in a constructor
 * ends that process only, as it would end an exec'd one.  hosted_depie hid them from dlmopen, which
 * has no flag to defer them; unknown tags are never relocated in place, so each is an address
 * relative to l_addr. */
static void run_exe_init(hosted_prog *p) {
    struct link_map *m = p->exe_map;
    uintptr_t pre = 0, init = 0, arr = 0;
    size_t pre_sz = 0, arr_sz = 0;
    if (!m || !m->l_ld) return;
    for (const ElfW(Dyn) *d = m->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_RPAL_HIDDEN + DT_PREINIT_ARRAY) pre = d->d_un.d_ptr;
        else if (d->d_tag == DT_RPAL_HIDDEN + DT_PREINIT_ARRAYSZ) pre_sz = d->d_un.d_val;
        else if (d->d_tag == DT_RPAL_HIDDEN + DT_INIT) init = d->d_un.d_ptr;
        else if (d->d_tag == DT_RPAL_HIDDEN + DT_INIT_ARRAY) arr = d->d_un.d_ptr;
        else if (d->d_tag == DT_RPAL_HIDDEN + DT_INIT_ARRAYSZ) arr_sz = d->d_un.d_val;
    }
    typedef void (*init_fn)(int, char **, char **);
    if (pre)
        for (size_t i = 0; i < pre_sz / sizeof(void *); i++)
            ((init_fn *)(pre + m->l_addr))[i](p->argc, p->argv, p->envp);
    if (init) ((init_fn)(init + m->l_addr))(p->argc, p->argv, p->envp);
    if (arr)
        for (size_t i = 0; i < arr_sz / sizeof(void *); i++)
            ((init_fn *)(arr + m->l_addr))[i](p->argc, p->argv, p->envp);
}

/* Run the executable's DT_FINI_ARRAY (reverse order) and DT_FINI: registered with the namespace's
 * __cxa_atexit before main, so it runs after the program's own atexit handlers, like _dl_fini. */
static void run_exe_fini(void *arg) {
    hosted_prog *p = arg;
    struct link_map *m = p->exe_map;
    if (!m || !m->l_ld) return;
    uintptr_t fini_array = 0, fini = 0;
    size_t fini_sz = 0;
    for (const ElfW(Dyn) *d = m->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_FINI_ARRAY) fini_array = d->d_un.d_ptr;
        else if (d->d_tag == DT_FINI_ARRAYSZ) fini_sz = d->d_un.d_val;
        else if (d->d_tag == DT_FINI) fini = d->d_un.d_ptr;
    }
    /* glibc does not relocate these d_ptr values in place (its _dl_fini adds l_addr); stay correct
     * if a future one does: add l_addr only to values below it. */
    if (fini_array && fini_sz) {
        void (**fa)(void) = (void (**)(void))(fini_array < m->l_addr ? fini_array + m->l_addr
                                                                     : fini_array);
        for (size_t i = fini_sz / sizeof(void *); i-- > 0;)
            if (fa[i] && fa[i] != (void (*)(void))-1) fa[i]();
    }
    if (fini) ((void (*)(void))(fini < m->l_addr ? fini + m->l_addr : fini))();
}

/* ---------------------------------------------------------------- load, start, wait */

static char **copy_strv(int n, char *const v[]) {
    char **c = calloc((size_t)n + 1, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < n; i++)
        if (!(c[i] = strdup(v[i]))) return NULL;
    return c;
}

static void *need(hosted_prog *p, const char *name, char *err, size_t errlen) {
    void *s = dlsym(p->handle, name);
    if (!s) seterr(err, errlen, "%s: symbol %s not found in its namespace", p->path, name);
    return s;
}

/* A PIE that reads libc data such as stdout directly carries copy relocations (R_X86_64_COPY):
 * the executable holds the variable and libc binds to that copy.  In the main namespace ld.so
 * fills the copy from libc's original; loaded by dlmopen, the lookup finds the executable's own
 * (still zero) copy first, so stdout would stay NULL.  Redo each copy from the first later object
 * of the namespace that defines the symbol.  The libraries' constructors ran inside dlmopen, bound
 * to the copy: one they wrote to (no longer all zero) keeps what they stored.  A copy of read-only
 * data lies in .data.rel.ro, which dlmopen has already made read-only (PT_GNU_RELRO): its pages are
 * made writable for the copy and read-only again, as ld.so leaves them. */
static void fix_copy_relocs(hosted_prog *p) {
    struct link_map *exe = p->exe_map;
    ElfW(Addr) base = exe->l_addr;
    const ElfW(Rela) *rela = NULL;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    size_t relasz = 0;
#define DYN_PTR(v) ((v) < base ? (v) + base : (v)) /* ld.so may have relocated it in place */
    for (const ElfW(Dyn) *d = exe->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_RELA) rela = (const ElfW(Rela) *)DYN_PTR(d->d_un.d_ptr);
        else if (d->d_tag == DT_RELASZ) relasz = d->d_un.d_val;
        else if (d->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)DYN_PTR(d->d_un.d_ptr);
        else if (d->d_tag == DT_STRTAB) strtab = (const char *)DYN_PTR(d->d_un.d_ptr);
    }
#undef DYN_PTR
    if (!rela || !symtab || !strtab) return;
    for (size_t i = 0; i < relasz / sizeof *rela; i++) {
        if (ELF64_R_TYPE(rela[i].r_info) != R_X86_64_COPY) continue;
        const ElfW(Sym) *sym = &symtab[ELF64_R_SYM(rela[i].r_info)];
        const char *name = strtab + sym->st_name;
        unsigned char *copy = (unsigned char *)(base + rela[i].r_offset);
        size_t k = 0;
        while (k < sym->st_size && !copy[k]) k++;
        if (k < sym->st_size) continue;
        for (struct link_map *m = exe->l_next; m; m = m->l_next) {
            void *h = dlmopen(p->lmid, m->l_name, RTLD_LAZY | RTLD_NOLOAD);
            if (!h) continue;
            void *orig = dlsym(h, name);
            dlclose(h);
            if (orig && orig != copy) {
                /* ld.so's _dl_protect_relro: whole pages from the segment's start to its end,
                 * both rounded down. */
                uintptr_t pg = (uintptr_t)getpagesize();
                uintptr_t r_lo = (base + p->relro_vaddr) & ~(pg - 1);
                uintptr_t r_hi = (base + p->relro_vaddr + p->relro_memsz) & ~(pg - 1);
                uintptr_t lo = (uintptr_t)copy & ~(pg - 1), hi = (uintptr_t)copy + sym->st_size;
                if (lo < r_lo) lo = r_lo;
                if (hi > r_hi) hi = r_hi;
                int ro = p->relro_memsz && lo < hi;
                if (ro && mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0) break;
                memcpy(copy, orig, sym->st_size);
                if (ro) mprotect((void *)lo, hi - lo, PROT_READ);
                break;
            }
        }
    }
}

/* The executable addresses its own thread-locals below the thread pointer (check_exe_tls), but a
 * library that refers to one of them (extern __thread) is bound by the dynamic linker to the
 * executable's TLS block as a dlmopen'd module, which is another piece of memory: the two would
 * see two variables.  Returns the first library of the namespace with a thread-local relocation
 * against an undefined symbol that the executable exports (names: exported_tls), and that
 * symbol's name in *sym; NULL when there is none. */
static const char *lib_using_exe_tls(const struct link_map *exe, const char *names, const char **sym) {
    for (const struct link_map *m = exe->l_next; m; m = m->l_next) {
        ElfW(Addr) base = m->l_addr;
        const ElfW(Rela) *rel[2] = { NULL, NULL };
        size_t relsz[2] = { 0, 0 };
        const ElfW(Sym) *symtab = NULL;
        const char *strtab = NULL;
#define DYN_PTR(v) ((v) < base ? (v) + base : (v)) /* ld.so may have relocated it in place */
        for (const ElfW(Dyn) *d = m->l_ld; d && d->d_tag != DT_NULL; d++) {
            if (d->d_tag == DT_RELA) rel[0] = (const ElfW(Rela) *)DYN_PTR(d->d_un.d_ptr);
            else if (d->d_tag == DT_RELASZ) relsz[0] = d->d_un.d_val;
            else if (d->d_tag == DT_JMPREL) rel[1] = (const ElfW(Rela) *)DYN_PTR(d->d_un.d_ptr);
            else if (d->d_tag == DT_PLTRELSZ) relsz[1] = d->d_un.d_val;
            else if (d->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)DYN_PTR(d->d_un.d_ptr);
            else if (d->d_tag == DT_STRTAB) strtab = (const char *)DYN_PTR(d->d_un.d_ptr);
        }
#undef DYN_PTR
        if (!symtab || !strtab) continue;
        for (int t = 0; t < 2; t++)
            for (size_t i = 0; rel[t] && i < relsz[t] / sizeof *rel[t]; i++) {
                unsigned type = (unsigned)ELF64_R_TYPE(rel[t][i].r_info);
                size_t k = ELF64_R_SYM(rel[t][i].r_info);
                if (!k || (type != R_X86_64_DTPMOD64 && type != R_X86_64_DTPOFF64 &&
                           type != R_X86_64_TPOFF64 && type != R_X86_64_TLSDESC))
                    continue;
                if (symtab[k].st_shndx != SHN_UNDEF) continue;
                const char *name = strtab + symtab[k].st_name;
                for (const char *n = names; *n; n += strlen(n) + 1)
                    if (!strcmp(n, name)) {
                        *sym = n;
                        return m->l_name;
                    }
            }
    }
    return NULL;
}

uintptr_t hosted_find_sigreturn(uintptr_t base, uintptr_t *lo, uintptr_t *hi) {
    static const unsigned char sigreturn[] = { 0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05 };
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;

    *lo = *hi = 0;
    if (!base || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_phentsize != sizeof(ElfW(Phdr))) return 0;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
    for (int k = 0; k < eh->e_phnum; k++) {
        if (ph[k].p_type != PT_LOAD || !(ph[k].p_flags & PF_X)) continue;
        if (*lo) return *lo = *hi = 0; /* two: no one range holds its code */
        *lo = base + ph[k].p_vaddr;
        *hi = *lo + ph[k].p_memsz;
    }
    const unsigned char *at = *lo ? memmem((const void *)*lo, *hi - *lo, sigreturn, sizeof sigreturn) : NULL;
    if (!at) *lo = *hi = 0;
    return (uintptr_t)at;
}

/*
 * The code of the namespace's libc (libc.so.6), and in it the instructions of its signal return:
 * the program's process returns from the launcher's SIGSYS handler through them, so that Syscall
 * User Dispatch, which lets that libc through on the program's threads, lets the return through
 * during a call (host.c).
 */
static void find_libc_sigreturn(hosted_prog *p) {
    const struct link_map *m = p->exe_map;

    p->libc_lo = p->libc_hi = p->libc_sigreturn = 0;
    while (m && m->l_prev) m = m->l_prev;
    for (; m; m = m->l_next) {
        const char *base = m->l_name ? strrchr(m->l_name, '/') : NULL;
        base = base ? base + 1 : m->l_name;
        if (base && !strcmp(base, "libc.so.6")) {
            p->libc_sigreturn = hosted_find_sigreturn(m->l_addr, &p->libc_lo, &p->libc_hi);
            return;
        }
    }
}

int hosted_libc_code(hosted_prog *p, uintptr_t *lo, uintptr_t *hi) {
    *lo = p->libc_lo;
    *hi = p->libc_hi;
    if (!p->libc_sigreturn) return 0;
    atomic_store(&p->libc_published, 1);
    return 1;
}

int hosted_code_ranges(const hosted_prog *p, uintptr_t *lo, uintptr_t *hi, int max) {
    uintptr_t shared[2] = { getauxval(AT_BASE), getauxval(AT_SYSINFO_EHDR) };
    const struct link_map *m = p->exe_map;
    int n = 0;
    while (m && m->l_prev) m = m->l_prev;
    /* Each object of the namespace has its own load address (a PIE executable's included); the
     * dynamic linker and the vDSO appear in every namespace at the same one.  dl_iterate_phdr
     * lists the caller's namespace only: the program headers are read where the first segment
     * maps the file's start, as they are for every object ld.so loads here. */
    for (; m && n < max; m = m->l_next) {
        const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)m->l_addr;
        if (!m->l_addr || m->l_addr == shared[0] || m->l_addr == shared[1]) continue;
        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_phentsize != sizeof(ElfW(Phdr))) continue;
        const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(m->l_addr + eh->e_phoff);
        for (int k = 0; k < eh->e_phnum && n < max; k++) {
            if (ph[k].p_type != PT_LOAD || !(ph[k].p_flags & PF_X)) continue;
            lo[n] = m->l_addr + ph[k].p_vaddr;
            hi[n] = lo[n] + ph[k].p_memsz;
            n++;
        }
    }
    return n;
}

/* ---------------------------------------------------------------- libraries held whole while they load */

/* The dynamic linker maps a program's libraries from their files, and the launcher runs their
 * constructors: a library cut short meanwhile (a cp over it writes it in place) faults there, and
 * the launcher ends with every program.  So each library the program needs is held by a read
 * lease from before the load until the program's process has started: an open for writing (cp,
 * truncate) then waits until then (a blocking open) or fails (a non-blocking one, as truncate(1)
 * makes), and the program, once running, is the only one its file can hurt.  A rename over a library, as package managers and
 * install(1) replace files, never touched the mapped one.  The list comes from the load rehearsed
 * in a child (rehearse_load), with the launcher's environment: the one the linker searches with. */

static void leases_release(struct leases *l) {
    for (int i = 0; i < l->n; i++) close(l->fd[i]); /* a lease ends with its descriptor */
    l->n = 0;
}

/* The running dynamic linker's file: the launcher's namespaces use it, whatever a program asks. */
static int find_ldso(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    if (info->dlpi_addr != getauxval(AT_BASE) || !info->dlpi_name || info->dlpi_name[0] != '/') return 0;
    snprintf(data, PATH_MAX, "%s", info->dlpi_name);
    return 1;
}

#define REHEARSAL_SECONDS 10

/* The dynamic linker's own report of a broken object: it then exits 127 where a dlmopen of the same
 * object would abort the launcher. */
static const char ldso_assert[] = "Inconsistency detected by ld.so";

/*
 * Rehearse the load of the executable at /proc/self/fd/mfd in a child: the dynamic linker run as a
 * program in trace mode (ldd -r's LD_TRACE_LOADED_OBJECTS, LD_WARN, LD_BIND_NOW) maps it and its
 * libraries, checks their versions and binds every relocation, as dlmopen will, but runs no
 * constructor.  A file damaged in its dynamic tables, relocations or version data crashes the
 * linker there instead of the launcher with every program in it.  Its list of libraries goes to
 * out (one per line, "name => path (address)").  0; -1 where it could not be run or said nothing
 * useful (the load goes on: dlmopen reports what is wrong); -2 with err where it crashed, failed
 * an assertion or did not finish in REHEARSAL_SECONDS.
 */
/* fd, or a close-on-exec copy of it above the standard descriptors (fd closed): a launcher
 * started with one of them closed would otherwise hand the child this one as its stdout. */
static int above_stdio(int fd) {
    if (fd < 0 || fd > 2) return fd;
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return copy;
}

static int rehearse_load(const char *path, int mfd_in, char *out, size_t outlen, char *err, size_t errlen) {
    char ldso[PATH_MAX] = "/lib64/ld-linux-x86-64.so.2", fdpath[64];
    dl_iterate_phdr(find_ldso, ldso);
    int mfd = mfd_in > 2 ? mfd_in : fcntl(mfd_in, F_DUPFD_CLOEXEC, 3);
    if (mfd < 0) return -1;
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", mfd);
    static const char *const trace[] = { "LD_TRACE_LOADED_OBJECTS=1", "LD_WARN=yes", "LD_BIND_NOW=yes" };
    extern char **environ;
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    char **envp = malloc((n + 4) * sizeof *envp);
    if (!envp) return -1;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_TRACE_", 9) && strncmp(environ[i], "LD_WARN=", 8) &&
            strncmp(environ[i], "LD_BIND_", 8) && strncmp(environ[i], "LD_DEBUG", 8))
            envp[k++] = environ[i];
    for (size_t i = 0; i < 3; i++) envp[k++] = (char *)trace[i];
    envp[k] = NULL;
    int pfd[2] = { -1, -1 }, efd = above_stdio(memfd_create("rpal-rehearsal", MFD_CLOEXEC));
    if (efd < 0 || pipe2(pfd, O_CLOEXEC) < 0 || (pfd[1] = above_stdio(pfd[1])) < 0) {
        if (efd >= 0) close(efd);
        if (pfd[0] >= 0) close(pfd[0]);
        if (mfd != mfd_in) close(mfd);
        free(envp);
        return -1;
    }
    /* The child starts with no signal blocked or ignored: not the load thread's mask, where a
     * stopping host's SIGTERM waits. */
    posix_spawnattr_t sa;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_init(&sa);
    posix_spawnattr_setsigmask(&sa, &none);
    posix_spawnattr_setsigdefault(&sa, &all);
    posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, efd, 2);
    posix_spawn_file_actions_adddup2(&fa, mfd, mfd); /* the same number, without close-on-exec */
    char *argv[] = { ldso, fdpath, NULL };
    pid_t pid;
    int e = posix_spawn(&pid, ldso, &fa, &sa, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&sa);
    free(envp);
    close(pfd[1]);
    if (mfd != mfd_in) close(mfd);
    if (e) {
        close(pfd[0]);
        close(efd);
        return -1;
    }
    /* Bounded even where nobody waits for it any more (a host that abandons the load). */
    struct rlimit cpu = { REHEARSAL_SECONDS, REHEARSAL_SECONDS + 1 };
    prlimit(pid, RLIMIT_CPU, &cpu, NULL);
    /* Read to the end, keeping what fits: a child blocked on a full pipe would never exit. */
    size_t len = 0;
    bool late = false;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = REHEARSAL_SECONDS * 1000L - ((now.tv_sec - t0.tv_sec) * 1000L + (now.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd pf = { .fd = pfd[0], .events = POLLIN };
        int ready = left > 0 ? poll(&pf, 1, (int)left) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            late = true;
            kill(pid, SIGKILL);
            break;
        }
        char sink[4096];
        char *to = len < outlen - 1 ? out + len : sink;
        size_t room = len < outlen - 1 ? outlen - 1 - len : sizeof sink;
        ssize_t r = read(pfd[0], to, room);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) break;
        if (to != sink) len += (size_t)r;
    }
    close(pfd[0]);
    out[len] = '\0';
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
    char msg[512] = "";
    ssize_t m = pread(efd, msg, sizeof msg - 1, 0);
    close(efd);
    msg[m > 0 ? m : 0] = '\0';
    if (late) {
        seterr(err, errlen,
               "%s: not loaded: the dynamic linker, rehearsing the load in a child, did not finish "
               "in %d s (is the file damaged?)",
               path, REHEARSAL_SECONDS);
        return -2;
    }
    /* A library not found: trace mode goes on where dlmopen stops, with a clear error, before it
     * binds anything; what trace mode does next says nothing of the load.  (Not so a version not
     * found: dlmopen has crashed after saying so.) */
    if (strstr(out, "=> not found")) return -1;
    if (w == pid && WIFSIGNALED(status) && WTERMSIG(status) != SIGPIPE) {
        seterr(err, errlen,
               "%s: not loaded: the dynamic linker crashed with signal %d rehearsing the load in a "
               "child: the file or one of its libraries is damaged, and loading it could end the host "
               "with every program",
               path, WTERMSIG(status));
        return -2;
    }
    char *said = strstr(msg, ldso_assert);
    if (w == pid && WIFEXITED(status) && WEXITSTATUS(status) != 0 && said) {
        said[strcspn(said, "\n")] = '\0';
        seterr(err, errlen,
               "%s: not loaded: the file or one of its libraries is damaged: the dynamic linker says "
               "\"%s\"",
               path, said);
        return -2;
    }
    return w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && len < outlen - 1 ? 0 : -1;
}

/* Whether the library open at fd, size bytes long, holds every segment its program headers
 * map: one cut short after the rehearsal and before its lease would fault when the linker or
 * the library's code touches the part past its end. */
static int library_whole(int fd, off_t size) {
    Elf64_Ehdr eh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_phentsize != sizeof(Elf64_Phdr))
        return 0;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph)) != (ssize_t)sizeof ph)
            return 0;
        if (ph.p_type == PT_LOAD && !phdr_in_file(&ph, (uint64_t)size)) return 0;
    }
    return 1;
}

/* Lease every library the program at /proc/self/fd/mfd needs, as its rehearsed load lists them.
 * 0, or -1 with err where the rehearsal failed (rehearse_load) or a library is being written and
 * stays so: loading either could end the launcher.  A library that cannot be leased
 * for any other reason (another owner, a file system without leases) loads as before. */
static int lease_libraries(const char *path, int mfd, struct leases *l, char *err, size_t errlen) {
    size_t size = 64 << 10;
    char *list = malloc(size);
    l->n = 0;
    if (!list) return 0;
    int rc = rehearse_load(path, mfd, list, size, err, errlen);
    if (rc < 0) {
        free(list);
        return rc == -2 ? -1 : 0;
    }
    for (char *line = list, *next; *line && l->n < LEASED_MAX; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        else next = line + strlen(line);
        char *lib = strstr(line, " => "), *end = strstr(line, " (0x");
        if (!lib || !end || end < lib + 4) continue; /* the vDSO, the linker, "not found" */
        lib += 4;
        *end = '\0';
        if (lib[0] != '/') continue;
        int fd = open(lib, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0) continue;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            continue;
        }
        /* No SIGIO for a lease break (its default ends a process): SIGURG's default ignores it. */
        fcntl(fd, F_SETSIG, SIGURG);
        int r, tries = 0;
        while ((r = fcntl(fd, F_SETLEASE, F_RDLCK)) < 0 && errno == EAGAIN && ++tries < 40)
            usleep(25000); /* open for writing now: a cp that ends soon */
        if (r < 0 && errno == EAGAIN) {
            close(fd);
            leases_release(l);
            seterr(err, errlen,
                   "%s: its library %s stayed open for writing for 1 s: not loaded, as a library cut "
                   "short while it loads would end the host (replace libraries by renaming a new "
                   "file over them)",
                   path, lib);
            free(list);
            return -1;
        }
        if (r < 0) {
            close(fd);
            continue;
        }
        l->fd[l->n++] = fd;
        if (fstat(fd, &st) < 0 || !library_whole(fd, st.st_size)) {
            leases_release(l);
            seterr(err, errlen,
                   "%s: its library %s was cut short while the program loaded (%lld bytes now, less "
                   "than its segments): not loaded",
                   path, lib, (long long)st.st_size);
            free(list);
            return -1;
        }
    }
    free(list);
    return 0;
}

hosted_prog *hosted_load(const char *path, int argc, char *const argv[], char *const envp[],
                         char *err, size_t errlen) {
    if (argc < 1 || !argv || !argv[0]) {
        seterr(err, errlen, "%s: empty argv", path);
        return NULL;
    }
    hosted_prog *p = calloc(1, sizeof *p);
    if (!p) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    p->path = strdup(path);
    p->argc = argc;
    p->argv = copy_strv(argc, argv);
    if (!envp) envp = hosted_clean_environ();
    int envc = 0;
    while (envp[envc]) envc++;
    p->envp = copy_strv(envc, envp);
    if (!p->path || !p->argv || !p->envp) {
        seterr(err, errlen, "out of memory");
        goto fail;
    }

    struct hosted_copy copy;
    int mfd = hosted_depie(path, &copy, err, errlen);
    if (mfd < 0) goto fail;
    p->relro_vaddr = copy.relro_vaddr;
    p->relro_memsz = copy.relro_memsz;
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", mfd);
    if (lease_libraries(path, mfd, &p->leases, err, errlen) < 0) {
        close(mfd);
        free(copy.tls_names);
        goto fail;
    }
    dlerror();
    /* The constructors of its libraries run inside dlmopen, here: let them see the program's
     * environment (dlmopen hands the caller's environ to the new namespace's libc). */
    extern char **environ;
    char **host_env = environ;
    environ = p->envp;
    p->handle = dlmopen(LM_ID_NEWLM, fdpath, RTLD_NOW | RTLD_LOCAL);
    environ = host_env;
    close(mfd); /* the mappings keep the memfd alive */
    if (!p->handle) {
        free(copy.tls_names);
        const char *e = dlerror();
        if (!e) e = "unknown error";
        if (strstr(e, "no more namespaces"))
            seterr(err, errlen,
                   "%s: glibc linker namespace limit reached: glibc allows at most %d namespaces "
                   "(DL_NNS, the ceiling of glibc.rtld.nns), so at most %d hosted programs per "
                   "process",
                   path, HOSTED_NNS, HOSTED_NNS - 1);
        else if (strstr(e, "static TLS"))
            seterr(err, errlen,
                   "%s: out of static TLS after %d programs: raise "
                   "glibc.rtld.optional_static_tls (RPAL_HOSTED_STATIC_TLS, now %s) [%s]",
                   path, ns_in_use - 1,
                   getenv("GLIBC_TUNABLES") ? getenv("GLIBC_TUNABLES") : "unset", e);
        else if (copy.origin_kept && strstr(e, "cannot open shared object file"))
            seterr(err, errlen,
                   "%s: dlmopen: %s (the program finds its libraries through $ORIGIN, which "
                   "could not be expanded for it: its directory's name has a ':' or '$', or its "
                   "file no room for the name; give the launcher, rpal run or rpal host, "
                   "LD_LIBRARY_PATH with the library directory, by a name without ':' or '$')",
                   path, e);
        else
            seterr(err, errlen, "%s: dlmopen: %s", path, e);
        goto fail;
    }
    atomic_fetch_add(&ns_in_use, 1);
    Lmid_t lmid = 0;
    dlinfo(p->handle, RTLD_DI_LMID, &lmid);
    p->lmid = lmid;
    dlinfo(p->handle, RTLD_DI_LINKMAP, &p->exe_map);
    /* The dynamic linker knows the executable as /proc/self/fd/N, the memfd copy's descriptor in
     * the launcher, which in the program's process is another file or none; dladdr(3),
     * dl_iterate_phdr(3), backtrace_symbols(3) and debuggers give that name to whoever opens it to
     * read symbols.  The program's own file has the same symbols at the same addresses: the one
     * hosted_depie opened, by the name its descriptor gave (path may name another file by now). */
    char *real = copy.file[0] ? strdup(copy.file) : realpath(path, NULL);
    if (real) p->exe_map->l_name = real;
    if (copy.tls_names) {
        const char *sym = NULL, *lib = lib_using_exe_tls(p->exe_map, copy.tls_names, &sym);
        if (lib) {
            seterr(err, errlen,
                   "%s: its thread-local variable %s is used by the library %s, which hosted would "
                   "see a variable of its own and not the executable's (an executable's thread-locals "
                   "lie where only its own code finds them); define %s in a shared library instead",
                   path, sym, lib, sym);
            free(copy.tls_names);
            goto fail;
        }
        free(copy.tls_names);
    }

    p->main = (main_fn)dlsym(p->handle, "main");
    if (!p->main) {
        seterr(err, errlen,
               "%s: main is not exported (link the program with -rdynamic, or "
               "-Wl,--export-dynamic-symbol=main)", path);
        goto fail;
    }
    if (!(p->ns_exit = (void (*)(int))need(p, "exit", err, errlen)) ||
        !(p->ns_pthread_create = (pthread_create_fn)need(p, "pthread_create", err, errlen)) ||
        !(p->ns_attr_init = (pthread_attr_init_fn)need(p, "pthread_attr_init", err, errlen)) ||
        !(p->ns_attr_destroy = (pthread_attr_init_fn)need(p, "pthread_attr_destroy", err, errlen)) ||
        !(p->ns_attr_setstacksize =
              (pthread_attr_setstacksize_fn)need(p, "pthread_attr_setstacksize", err, errlen)) ||
        !(p->ns_cxa_atexit = (cxa_atexit_fn)need(p, "__cxa_atexit", err, errlen)))
        goto fail;

    /* glibc-private (GLIBC_PRIVATE since 2.34): without it a main that ends with pthread_exit()
     * leaves its process alive after its last thread. */
    p->ns_nthreads = dlsym(p->handle, "__nptl_nthreads");
    find_libc_sigreturn(p);
    fix_copy_relocs(p);
    char ***env = dlsym(p->handle, "environ");
    if (env) *env = p->envp;
    char **pin = dlsym(p->handle, "program_invocation_name");
    if (pin) *pin = p->argv[0];
    char **pisn = dlsym(p->handle, "program_invocation_short_name");
    if (pisn) {
        const char *b = strrchr(p->argv[0], '/');
        *pisn = b ? (char *)b + 1 : p->argv[0];
    }
    atomic_store(&p->state, ST_LOADED);
    int slot = atomic_fetch_add(&registry_n, 1);
    if (slot < HOSTED_NNS) registry[slot] = p;
    return p;

fail:
    /* The namespace (if any) is left loaded: dlclose of a namespace whose libc ran is not safe. */
    leases_release(&p->leases);
    if (p->argv) for (int i = 0; i < p->argc; i++) free(p->argv[i]);
    free(p->argv);
    if (p->envp) for (int i = 0; p->envp[i]; i++) free(p->envp[i]);
    free(p->envp);
    free(p->path);
    free(p);
    return NULL;
}

static void *prog_thread(void *arg) {
    hosted_prog *p = arg;
    /* Until the leader has blocked every signal, a signal for the process could run a handler of
     * the program on the leader, which has the launcher's TCB. */
    while (!atomic_load(&p->leader_quiet)) raw1(SYS_sched_yield, 0);
    atomic_store(&p->main_tid, (int)raw1(SYS_gettid, 0));
    atomic_store(&p->main_fs, hosted_get_fs());
    p->ns_cxa_atexit(run_exe_fini, p, NULL);
    /* The namespace's libc counts a main thread it never had (its count starts at 1), so the last
     * thread to end (main's pthread_exit, then its other threads) would not call exit(0) as in a
     * plain process, and the leader would keep the process alive for ever.  Only this thread
     * exists yet. */
    if (p->ns_nthreads) atomic_fetch_sub(p->ns_nthreads, 1);
    run_exe_init(p);
    /* Handlers, stdio flush, then the namespace's _exit: exit_group of this process only. */
    p->ns_exit(p->main(p->argc, p->argv, p->envp));
    return NULL;
}

/* Emulate exec for descriptors: close those marked close-on-exec, which the program's process
 * inherited from the launcher with the rest of its descriptor table. */
__attribute__((no_sanitize("address"))) static void close_cloexec(void) {
    char buf[2048];
    int dir = (int)raw4(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dir < 0) return;
    for (;;) {
        long n = raw3(SYS_getdents64, dir, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; }
                *d = (void *)(buf + off);
            long fd = 0;
            const char *c = d->name;
            for (; *c >= '0' && *c <= '9'; c++) fd = fd * 10 + (*c - '0');
            if (!*c && c != d->name && fd != dir && (raw2(SYS_fcntl, fd, F_GETFD) & FD_CLOEXEC))
                raw1(SYS_close, fd);
            off += d->reclen;
        }
    }
    raw1(SYS_close, dir);
}

/* Signal dispositions as exec gives them (caught signals back to their default action, ignored
 * ones stay ignored), or as the joiner had them (sp->set_ignored).  Except those the launcher
 * catches to make RPAL calls safe (host.c): Syscall User Dispatch's SIGSYS and the faults of a
 * receiver borrowed by another program's thread. */
__attribute__((no_sanitize("address"))) static void reset_handlers(const hosted_spawn *sp) {
    struct ksigaction ka, dfl = { 0 }, ign = { (uintptr_t)SIG_IGN, 0, 0, 0 };
    for (int sig = 1; sig <= 64; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSYS || sig == SIGSEGV || sig == SIGBUS ||
            sig == SIGFPE || sig == SIGILL)
            continue;
        if (sp && sp->set_ignored)
            raw4(SYS_rt_sigaction, sig, (sp->ignored >> (sig - 1)) & 1 ? &ign : &dfl, NULL, 8);
        else if (raw4(SYS_rt_sigaction, sig, NULL, &ka, 8) == 0 && ka.handler != (uintptr_t)SIG_DFL &&
                 ka.handler != (uintptr_t)SIG_IGN)
            raw4(SYS_rt_sigaction, sig, &dfl, NULL, 8);
    }
}

/*
 * The first task of a program's process: clone(CLONE_VM) without CLONE_THREAD, CLONE_FILES,
 * CLONE_SIGHAND or CLONE_FS, so it has its own PID, descriptors, signal dispositions, cwd and
 * rlimits.  It has no TCB of its own: it runs on the launcher thread's, which waits on p->spawned
 * (raw futex, no TLS) until this task is done with it.  It sets the process up as the joiner asked,
 * creates the program's main thread with the namespace's pthread_create (that libc's TCB, in this
 * process's thread group), then blocks every signal and sleeps for good: the process lives as long
 * as its threads, /proc/PID stays complete, and signals for the process go to the program's threads.
 */
__attribute__((no_sanitize("address"), noreturn)) static int start_process(void *arg) {
    hosted_prog *p = arg;
    const hosted_spawn *sp = p->spawn;
    int rc = 0;

    raw2(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL); /* the host is gone: so are its programs */
    if (raw1(SYS_getppid, 0) != p->launcher) rc = ESRCH;
    /* Its name for ps, top and pgrep, as exec would give it (its threads inherit it); the command
     * line stays the host's, which shares the memory it lives in. */
    const char *base = p->path;
    for (const char *c = p->path; *c; c++)
        if (*c == '/') base = c + 1;
    raw2(SYS_prctl, PR_SET_NAME, (long)base);
    /* Under Yama's ptrace_scope 1 only ancestors may take a descriptor of ours (pidfd_getfd): the
     * host's other programs are its children, so name the host. */
    raw2(SYS_prctl, PR_SET_PTRACER, p->launcher);
    for (int i = 0; sp && !rc && i < 3; i++)
        if (sp->fds[i] >= 0 && sp->fds[i] != i && raw2(SYS_dup2, sp->fds[i], i) < 0) rc = EBADF;
    if (sp && !rc && sp->cwd && raw1(SYS_fchdir, sp->cwd_fd) < 0) rc = ENOENT;
    if (sp && !rc && sp->umask >= 0) raw1(SYS_umask, sp->umask);
    if (sp && !rc && sp->own_pgrp) raw2(SYS_setpgid, 0, 0);
    for (int i = 0; sp && !rc && i < sp->nrlimits; i++) {
        struct rlimit rl = { sp->rlimits[i].cur, sp->rlimits[i].max };
        raw4(SYS_prlimit64, 0, sp->rlimits[i].resource, &rl, NULL);
    }
    if (sp && !rc && sp->pid_out) atomic_store(sp->pid_out, (int)raw1(SYS_getpid, 0));
    if (!rc) reset_handlers(sp);
    if (!rc && atomic_load(&p->libc_published)) {
        /* The launcher's SIGSYS action returns through its own code, which Syscall User Dispatch
         * lets through on no thread of ours: through our libc's instead (find_libc_sigreturn). */
        struct ksigaction ka;
        if (raw4(SYS_rt_sigaction, SIGSYS, NULL, &ka, 8) == 0 && ka.restorer == (uintptr_t)hosted_sigsys_restorer) {
            ka.restorer = p->libc_sigreturn;
            raw4(SYS_rt_sigaction, SIGSYS, &ka, NULL, 8);
        }
    }
    if (sp && !rc && sp->set_sigmask) raw4(SYS_rt_sigprocmask, SIG_SETMASK, &sp->sigmask, NULL, 8);
    if (!rc && p->setxid.handler) {
        uint64_t bit = 1ull << (GLIBC_SIGSETXID - 1);
        raw4(SYS_rt_sigaction, GLIBC_SIGSETXID, &p->setxid, NULL, 8);
        raw4(SYS_rt_sigprocmask, SIG_UNBLOCK, &bit, NULL, 8);
    }
    if (sp && !rc && sp->only_std_fds) raw3(SYS_close_range, 3, ~0u, 0);
    else if (!rc) close_cloexec();
    if (!rc) {
        union {
            char bytes[64];
            long align;
        } attr; /* pthread_attr_t of the namespace's libc (same glibc: 56 bytes) */
        p->ns_attr_init(&attr);
        p->ns_attr_setstacksize(&attr, p->stack_size);
        rc = p->ns_pthread_create(&p->thread, &attr, prog_thread, p);
        p->ns_attr_destroy(&attr);
    }
    p->create_rc = rc;
    atomic_store(&p->spawned, 1);
    raw6(SYS_futex, (long)&p->spawned, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
    /* From here on not a word of the launcher's TLS. */
    if (rc) raw1(SYS_exit_group, 127);
    uint64_t all = ~0ull;
    raw4(SYS_rt_sigprocmask, SIG_BLOCK, &all, NULL, sizeof all);
    atomic_store(&p->leader_quiet, 1);
    for (;;) raw1(SYS_pause, 0);
}

/* The dynamic linker is shared by every namespace, and its locks (TLS bookkeeping in
 * pthread_create, dlopen) are the launcher's libc's mutexes.  That libc skips the atomic
 * instructions while it thinks the process single-threaded, which it does until it creates a
 * thread itself: the programs' threads come from their own libc copies.  Without this, two
 * programs creating threads at once could both take the TLS lock, or one could sleep on it
 * forever. */
static pthread_once_t threaded_once = PTHREAD_ONCE_INIT;
static int threaded_rc;

static void *no_op(void *arg) { return arg; }

static void make_threaded(void) {
    pthread_t t;
    threaded_rc = pthread_create(&t, NULL, no_op, NULL);
    if (!threaded_rc) pthread_join(t, NULL);
}

static int launcher_threaded(char *err, size_t errlen) {
    pthread_once(&threaded_once, make_threaded);
    if (threaded_rc) seterr(err, errlen, "pthread_create: %s", strerror(threaded_rc));
    return threaded_rc ? -1 : 0;
}

/*
 * setuid() and its family change the ids of every thread of a process: glibc sends each the
 * SIGSETXID signal, whose handler its pthread_create installs the first time it runs in a process
 * it thinks single-threaded.  A namespace's libc never thinks so (dlmopen tells it that it is not
 * the process's first libc), and each program's process has dispositions of its own: without
 * the handler, a setuid() in a program with threads kills it.  The handler is hidden from dlsym,
 * but the launcher's libc installed its own copy (launcher_threaded), and a namespace that loaded
 * the same file has its copy at the same offset from its base: that action is what the program's
 * process installs.  Where the files differ, handler stays 0 and nothing is installed.
 */
static void find_setxid_action(hosted_prog *p) {
    struct ksigaction ka;
    Dl_info ours, theirs;
    struct stat a, b;

    memset(&p->setxid, 0, sizeof(p->setxid));
    if (raw4(SYS_rt_sigaction, GLIBC_SIGSETXID, NULL, &ka, 8) != 0 || ka.handler == (uintptr_t)SIG_DFL ||
        ka.handler == (uintptr_t)SIG_IGN)
        return;
    if (!dladdr((void *)ka.handler, &ours) || !ours.dli_fname || !ours.dli_fbase ||
        !dladdr((void *)p->ns_pthread_create, &theirs) || !theirs.dli_fname || !theirs.dli_fbase)
        return;
    if (stat(ours.dli_fname, &a) != 0 || stat(theirs.dli_fname, &b) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino)
        return;
    p->setxid = ka;
    p->setxid.handler = (uintptr_t)theirs.dli_fbase + (ka.handler - (uintptr_t)ours.dli_fbase);
}

int hosted_start(hosted_prog *p, char *err, size_t errlen) {
    return hosted_start_spawn(p, NULL, err, errlen);
}

static int start_spawn(hosted_prog *p, const hosted_spawn *sp, char *err, size_t errlen);

int hosted_start_spawn(hosted_prog *p, const hosted_spawn *sp, char *err, size_t errlen) {
    int ret = start_spawn(p, sp, err, errlen);
    /* Its process runs, or it will not: nothing of ours reads its libraries from now on. */
    leases_release(&p->leases);
    return ret;
}

static int start_spawn(hosted_prog *p, const hosted_spawn *sp, char *err, size_t errlen) {
    if (launcher_threaded(err, errlen) < 0) return -1;
    if (atomic_load(&p->state) != ST_LOADED) {
        seterr(err, errlen, "%s: already started", p->path);
        return -1;
    }
    find_setxid_action(p);
    size_t stack = 8u << 20;
    struct rlimit rl;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur >= (64u << 10) && rl.rlim_cur <= (256u << 20))
        stack = rl.rlim_cur;
    p->stack_size = stack;
    if (!p->leader_stack) {
        p->leader_stack = mmap(NULL, LEADER_STACK, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (p->leader_stack == MAP_FAILED) {
            p->leader_stack = NULL;
            seterr(err, errlen, "%s: mmap: %s", p->path, strerror(errno));
            return -1;
        }
    }
    p->spawn = sp;
    p->launcher = getpid();
    atomic_store(&p->spawned, 0);
    atomic_store(&p->state, ST_RUNNING);
    pid_t pid = clone(start_process, (char *)p->leader_stack + LEADER_STACK, CLONE_VM | SIGCHLD, p);
    if (pid < 0) {
        atomic_store(&p->state, ST_LOADED);
        seterr(err, errlen, "%s: clone: %s", p->path, strerror(errno));
        return -1;
    }
    /* The new process runs on this thread's TCB until it says so: wait without touching TLS.  A
     * process killed before it said so never will: look for its end every 10 ms (without reaping
     * it, which the failure path below does). */
    siginfo_t died;
    while (!atomic_load(&p->spawned)) {
        struct timespec tick = { 0, 10 * 1000 * 1000 };
        raw6(SYS_futex, (long)&p->spawned, FUTEX_WAIT_PRIVATE, 0, (long)&tick, 0, 0);
        if (atomic_load(&p->spawned)) break;
        died.si_pid = 0;
        if (raw6(SYS_waitid, P_PID, pid, (long)&died, WEXITED | WNOHANG | WNOWAIT, 0, 0) == 0 &&
            died.si_pid == pid) {
            if (!atomic_load(&p->spawned)) p->create_rc = ECHILD; /* else its own word stands */
            break;
        }
    }
    p->pid = pid;
    p->spawn = NULL;
    if (p->create_rc) {
        int rc = p->create_rc;
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        atomic_store(&p->state, ST_LOADED);
        p->pid = 0;
        if (rc == ESRCH) seterr(err, errlen, "%s: the launcher went away", p->path);
        else if (rc == EBADF) seterr(err, errlen, "%s: cannot set up its standard descriptors", p->path);
        else if (rc == ECHILD && died.si_code != CLD_EXITED)
            seterr(err, errlen, "%s: its process was killed by signal %d before it started", p->path,
                   died.si_status);
        else if (rc == ECHILD)
            seterr(err, errlen, "%s: its process ended before it started", p->path);
        else if (rc == ENOENT && sp && sp->cwd)
            seterr(err, errlen, "%s: cannot enter its working directory %s", p->path, sp->cwd);
        else seterr(err, errlen, "%s: pthread_create: %s", p->path, strerror(rc));
        return -1;
    }
    return 0;
}

/* Reap the program's process (flags: 0 or WNOHANG); 1 when it has ended. */
static int reap(hosted_prog *p, int flags) {
    int ws = 0;
    pid_t r;
    if (atomic_load(&p->state) == ST_DONE) return 1;
    while ((r = waitpid(p->pid, &ws, flags)) < 0 && errno == EINTR)
        ;
    if (r == 0) return 0;
    if (r < 0) { /* reaped by someone else: the status is lost */
        p->status = 255;
    } else if (WIFSIGNALED(ws)) {
        p->signal = WTERMSIG(ws);
        p->core_dumped = WCOREDUMP(ws) != 0;
        p->status = 128 + p->signal;
    } else {
        p->status = WEXITSTATUS(ws);
    }
    atomic_store(&p->state, ST_DONE);
    return 1;
}

int hosted_done(hosted_prog *p) {
    int s = atomic_load(&p->state);
    return s == ST_DONE || (s == ST_RUNNING && reap(p, WNOHANG));
}

int hosted_wait(hosted_prog *p) {
    if (atomic_load(&p->state) == ST_LOADED) return -1;
    reap(p, 0);
    return p->status;
}

int hosted_signal(const hosted_prog *p) { return atomic_load(&p->state) == ST_DONE ? p->signal : 0; }
int hosted_core_dumped(const hosted_prog *p) { return atomic_load(&p->state) == ST_DONE && p->core_dumped; }
int hosted_pid(const hosted_prog *p) { return p->pid; }

int hosted_count(void) {
    int n = atomic_load(&registry_n);
    return n < HOSTED_NNS ? n : HOSTED_NNS;
}

hosted_prog *hosted_get(int i) { return i >= 0 && i < hosted_count() ? registry[i] : NULL; }

void *hosted_sym(hosted_prog *p, const char *name) { return dlsym(p->handle, name); }
uintptr_t hosted_main_fsbase(const hosted_prog *p) { return atomic_load(&p->main_fs); }
int hosted_main_tid(const hosted_prog *p) { return atomic_load(&p->main_tid); }
long hosted_lmid(const hosted_prog *p) { return p->lmid; }
const char *hosted_path(const hosted_prog *p) { return p->path; }
