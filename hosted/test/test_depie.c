/* test_depie.c: the ELF patcher clears DF_1_PIE in a memfd copy, validates input, and the copy
 * loads with dlmopen where the original is refused. */
#include "../hosted.h"
#include "check.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int dyn_flags1(int fd, Elf64_Xword *out) {
    struct stat st;
    if (fstat(fd, &st) < 0) return -1;
    unsigned char *b = malloc((size_t)st.st_size);
    if (!b || pread(fd, b, (size_t)st.st_size, 0) != st.st_size) return -1;
    Elf64_Ehdr *eh = (Elf64_Ehdr *)b;
    int found = -1;
    for (int i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr *ph = (Elf64_Phdr *)(b + eh->e_phoff + (size_t)i * sizeof *ph);
        if (ph->p_type != PT_DYNAMIC) continue;
        for (Elf64_Dyn *d = (Elf64_Dyn *)(b + ph->p_offset); d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_FLAGS_1) *out = d->d_un.d_val, found = 0;
    }
    free(b);
    return found;
}

static void write_file(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        if (write(fd, data, n) != (ssize_t)n) perror("write");
        close(fd);
    }
}

/* The entry of the dynamic section of img with that tag, or NULL. */
static Elf64_Dyn *dyn_entry(unsigned char *img, Elf64_Sxword tag) {
    Elf64_Ehdr *eh = (Elf64_Ehdr *)img;
    for (int i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr *ph = (Elf64_Phdr *)(img + eh->e_phoff + (size_t)i * sizeof *ph);
        if (ph->p_type != PT_DYNAMIC) continue;
        for (Elf64_Dyn *d = (Elf64_Dyn *)(img + ph->p_offset); d->d_tag != DT_NULL; d++)
            if (d->d_tag == tag) return d;
    }
    return NULL;
}

/* The bytes of img at a virtual address of a loadable segment. */
static unsigned char *at_addr(unsigned char *img, Elf64_Addr addr) {
    Elf64_Ehdr *eh = (Elf64_Ehdr *)img;
    for (int i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr *ph = (Elf64_Phdr *)(img + eh->e_phoff + (size_t)i * sizeof *ph);
        if (ph->p_type == PT_LOAD && addr >= ph->p_vaddr && addr < ph->p_vaddr + ph->p_filesz)
            return img + ph->p_offset + (addr - ph->p_vaddr);
    }
    return NULL;
}

/* Write img with one change made by damage(), and expect hosted_depie to refuse it as damaged. */
static int refused_damaged(const char *path, const unsigned char *orig, size_t size,
                           int (*damage)(unsigned char *), char *err, size_t errlen) {
    unsigned char *img = malloc(size);
    memcpy(img, orig, size);
    int ok = damage(img) == 0;
    write_file(path, img, size);
    free(img);
    int fd = hosted_depie(path, NULL, err, errlen);
    if (fd >= 0) close(fd);
    return ok && fd < 0 && strstr(err, "damaged") != NULL;
}

static int versym_far(unsigned char *img) {
    Elf64_Dyn *d = dyn_entry(img, DT_VERSYM);
    return d ? (d->d_un.d_ptr = 0x7ff000000, 0) : -1;
}
static int strsz_huge(unsigned char *img) {
    Elf64_Dyn *d = dyn_entry(img, DT_STRSZ);
    return d ? (d->d_un.d_val = 1u << 30, 0) : -1;
}
/* The first needed-version entry names its first version's string ("GLIBC_..."), not a library. */
static int verneed_file(unsigned char *img) {
    Elf64_Dyn *d = dyn_entry(img, DT_VERNEED);
    Elf64_Verneed *vn = d ? (Elf64_Verneed *)at_addr(img, d->d_un.d_ptr) : NULL;
    if (!vn) return -1;
    vn->vn_file = ((Elf64_Vernaux *)((unsigned char *)vn + vn->vn_aux))->vna_name;
    return 0;
}
/* The first needed version's chain goes on far past the file. */
static int vernaux_next(unsigned char *img) {
    Elf64_Dyn *d = dyn_entry(img, DT_VERNEED);
    Elf64_Verneed *vn = d ? (Elf64_Verneed *)at_addr(img, d->d_un.d_ptr) : NULL;
    if (!vn) return -1;
    ((Elf64_Vernaux *)((unsigned char *)vn + vn->vn_aux))->vna_next = 0x100000;
    return 0;
}
/* The first relocation that names a symbol (GLOB_DAT), or NULL. */
static Elf64_Rela *symbol_reloc(unsigned char *img) {
    Elf64_Dyn *d = dyn_entry(img, DT_RELA), *sz = dyn_entry(img, DT_RELASZ);
    Elf64_Rela *r = d && sz ? (Elf64_Rela *)at_addr(img, d->d_un.d_ptr) : NULL;
    for (size_t i = 0; r && i < sz->d_un.d_val / sizeof *r; i++)
        if (ELF64_R_TYPE(r[i].r_info) == R_X86_64_GLOB_DAT) return &r[i];
    return NULL;
}
/* A symbol's relocation made an indirect one whose resolver is read-only data, not code. */
static int irelative_data(unsigned char *img) {
    Elf64_Rela *r = symbol_reloc(img);
    if (!r) return -1;
    r->r_info = ELF64_R_INFO(0, R_X86_64_IRELATIVE);
    r->r_addend = 0x2000;
    return 0;
}
/* A relocation naming symbol 3000 of a table of a few tens. */
static int reloc_symbol_index(unsigned char *img) {
    Elf64_Rela *r = symbol_reloc(img);
    if (!r) return -1;
    r->r_info = ELF64_R_INFO(3000, R_X86_64_GLOB_DAT);
    return 0;
}
/* The last symbol's version index is one no table defines. */
static int versym_index(unsigned char *img) {
    Elf64_Dyn *d = dyn_entry(img, DT_VERSYM), *h = dyn_entry(img, DT_GNU_HASH);
    Elf64_Half *v = d ? (Elf64_Half *)at_addr(img, d->d_un.d_ptr) : NULL;
    if (!v || !h) return -1;
    v[1] = 0x7ffe; /* the first symbol after the null one */
    return 0;
}

int main(void) {
    char err[512];
    struct hosted_copy copy;

    void *h = dlmopen(LM_ID_NEWLM, PROG_COUNTER, RTLD_NOW | RTLD_LOCAL);
    CHECK(h == NULL && strstr(dlerror(), "position-independent executable"),
          "negative control: glibc refuses to dlmopen the PIE executable as built");

    int fd = hosted_depie(PROG_COUNTER, &copy, err, sizeof err);
    CHECK(fd >= 0, "hosted_depie makes a memfd copy of prog_counter (%s)", fd < 0 ? err : "");
    CHECK(copy.was_pie, "the original had DF_1_PIE set");
    free(copy.tls_names);
    Elf64_Xword f1 = 0;
    CHECK(fd >= 0 && dyn_flags1(fd, &f1) == 0 && !(f1 & DF_1_PIE),
          "the copy's DT_FLAGS_1 (0x%llx) lacks DF_1_PIE", (unsigned long long)f1);
    int ofd = open(PROG_COUNTER, O_RDONLY);
    Elf64_Xword of1 = 0;
    CHECK(ofd >= 0 && dyn_flags1(ofd, &of1) == 0 && (of1 & DF_1_PIE) && (of1 & ~DF_1_PIE) == f1,
          "the file on disk is untouched and only that bit differs");
    close(ofd);
    CHECK(ftruncate(fd, 64) < 0 && errno == EPERM && pwrite(fd, "x", 1, 0) < 0 && errno == EPERM,
          "the copy is sealed: it can be neither cut short nor written (%s)", strerror(errno));

    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    h = dlmopen(LM_ID_NEWLM, p, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlmopen of the patched copy works (%s)", h ? "" : dlerror());
    CHECK(h && dlsym(h, "main") && dlsym(h, "counter"), "main and globals are found in it");
    close(fd);

    /* Bad inputs are refused with a message, never read out of bounds. */
    char tmpl[] = "/tmp/hosted_depie_XXXXXX";
    int tfd = mkstemp(tmpl);
    fchmod(tfd, 0700); /* executable: each is refused for what it holds */
    close(tfd);
    write_file(tmpl, "#!/bin/sh\n", 10);
    CHECK(hosted_depie(tmpl, NULL, err, sizeof err) < 0, "a shell script is refused: %s", err);
    CHECK(strstr(err, "script") && strstr(err, "/bin/sh"), "the message says it is a script for /bin/sh");
    write_file(tmpl, "#! /usr/bin/perl -w\nprint 1;\n", 28);
    CHECK(hosted_depie(tmpl, NULL, err, sizeof err) < 0 && strstr(err, "/usr/bin/perl -w ") &&
              strstr(err, tmpl),
          "a perl script: the message gives the interpreter's command line: %s", err);

    /* Truncated copies of the real executable at many lengths. */
    int src = open(PROG_COUNTER, O_RDONLY);
    struct stat st;
    fstat(src, &st);
    unsigned char *img = malloc((size_t)st.st_size);
    if (pread(src, img, (size_t)st.st_size, 0) != st.st_size) return 1;
    close(src);
    int refused = 0, tried = 0;
    size_t cuts[] = {16, 63, 64, 100, 200, 500, 1000, 4000};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_file(tmpl, img, cuts[i]);
        int r = hosted_depie(tmpl, NULL, err, sizeof err);
        tried++;
        if (r < 0) refused++;
        else close(r);
    }
    CHECK(refused == tried, "%d/%d truncated headers refused (last: %s)", refused, tried, err);

    /* Corrupt program header offset and a dynamic section pointing past the end. */
    Elf64_Ehdr *eh = (Elf64_Ehdr *)img;
    Elf64_Ehdr save = *eh;
    eh->e_phoff = (Elf64_Off)st.st_size - 8;
    write_file(tmpl, img, (size_t)st.st_size);
    CHECK(hosted_depie(tmpl, NULL, err, sizeof err) < 0, "e_phoff past the end: %s", err);
    *eh = save;
    for (int i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr *ph = (Elf64_Phdr *)(img + eh->e_phoff + (size_t)i * sizeof *ph);
        if (ph->p_type == PT_DYNAMIC) ph->p_filesz = (Elf64_Xword)st.st_size;
    }
    write_file(tmpl, img, (size_t)st.st_size);
    CHECK(hosted_depie(tmpl, NULL, err, sizeof err) < 0, "PT_DYNAMIC past the end: %s", err);
    eh->e_type = ET_EXEC;
    write_file(tmpl, img, (size_t)st.st_size);
    CHECK(hosted_depie(tmpl, NULL, err, sizeof err) < 0 && strstr(err, "-pie"),
          "a non-PIE executable is refused with advice: %s", err);
    *eh = save;

    /* Dynamic tables the linker would read outside the file, at whatever the launcher has mapped
     * beyond it, or that it would follow without a bound: refused as damaged. */
    {
        unsigned char *orig = malloc((size_t)st.st_size);
        src = open(PROG_COUNTER, O_RDONLY);
        if (!orig || pread(src, orig, (size_t)st.st_size, 0) != st.st_size) return 1;
        close(src);
        static const struct { int (*damage)(unsigned char *); const char *what; } cases[] = {
            { versym_far, "DT_VERSYM far outside the segments" },
            { strsz_huge, "DT_STRSZ of 1 GiB" },
            { verneed_file, "versions needed from a library that is not DT_NEEDED" },
            { vernaux_next, "a needed version's next entry far past the file" },
            { versym_index, "a symbol's version index that no table defines" },
            { irelative_data, "an IRELATIVE relocation whose resolver is not code" },
            { reloc_symbol_index, "a relocation naming symbol 3000" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            CHECK(refused_damaged(tmpl, orig, (size_t)st.st_size, cases[i].damage, err, sizeof err),
                  "%s: refused (%s)", cases[i].what, err);
        write_file(tmpl, orig, (size_t)st.st_size);
        int fd2 = hosted_depie(tmpl, NULL, err, sizeof err);
        CHECK(fd2 >= 0, "the same file undamaged is taken (%s)", fd2 < 0 ? err : "");
        if (fd2 >= 0) close(fd2);
        free(orig);
    }

    /* 5000 program headers, then 5000 section headers, appended: refused with the counts rather
     * than compared with one another (find_rooms). */
    size_t big = (size_t)st.st_size + 5000 * sizeof(Elf64_Shdr);
    unsigned char *many = calloc(1, big);
    memcpy(many, img, (size_t)st.st_size);
    memcpy(many + st.st_size, img + save.e_phoff, save.e_phnum * sizeof(Elf64_Phdr));
    eh = (Elf64_Ehdr *)many;
    eh->e_phoff = (Elf64_Off)st.st_size;
    eh->e_phnum = 5000;
    write_file(tmpl, many, big);
    CHECK(hosted_depie(tmpl, NULL, err, sizeof err) < 0 && strstr(err, "5000 program headers"),
          "5000 program headers are refused: %s", err);
    *eh = save;
    eh->e_shoff = (Elf64_Off)st.st_size;
    eh->e_shnum = 5000;
    eh->e_shstrndx = SHN_UNDEF;
    write_file(tmpl, many, big);
    CHECK(hosted_depie(tmpl, NULL, err, sizeof err) < 0 && strstr(err, "5000 section headers"),
          "5000 section headers are refused: %s", err);
    free(many);

    /* A file cut short and written again while it is read, as its owner can do to a program
     * being joined: each read either works or fails with a message, and never raises SIGBUS
     * (which would end a launcher and every program it hosts). */
    src = open(PROG_COUNTER, O_RDONLY);
    if (pread(src, img, (size_t)st.st_size, 0) != st.st_size) return 1;
    close(src);
    write_file(tmpl, img, (size_t)st.st_size);
    pid_t cutter = fork();
    if (cutter == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);       /* a reader killed by SIGBUS takes us along */
        int wfd = open(tmpl, O_WRONLY);
        for (;;) {
            if (ftruncate(wfd, 64) < 0 || pwrite(wfd, img, (size_t)st.st_size, 0) != st.st_size) _exit(1);
            usleep(50);
        }
    }
    int works = 0, fails = 0, shorter = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        int r = hosted_depie(tmpl, NULL, err, sizeof err);
        if (r >= 0) works++, close(r);
        else fails++, shorter += strstr(err, "became shorter") != NULL;
        if (r < 0 && fails == 1) printf("      first refusal: %s\n", err);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) < 1500000000L);
    kill(cutter, SIGKILL);
    waitpid(cutter, NULL, 0);
    CHECK(works + fails > 0, "%d reads of a file cut short and rewritten meanwhile: %d worked, %d refused "
          "(%d of them: became shorter while read), none raised SIGBUS", works + fails, works, fails, shorter);
    free(img);
    unlink(tmpl);
    CHECK_DONE();
}
