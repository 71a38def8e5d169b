/*
 * mac_hide_sme.dylib — DYLD_INSERT_LIBRARIES library that makes a macOS arm64 process believe its
 * CPU has no SME/SME2, so the *same* runner binary gives the "sme2-off" variant on a Mac.
 *
 * Why this works: on macOS, cpuinfo (which XNNPACK asks once per process) learns about SME from
 * sysctlbyname("hw.optional.arm.FEAT_SME") and ("hw.optional.arm.FEAT_SME2"). This library
 * interposes sysctlbyname and answers 0 for every "hw.optional.arm.FEAT_SME*" key (SME, SME2,
 * SME2p1, SME_F64F64, ...): hiding SME1 too keeps XNNPACK from falling back to SME1 kernels.
 * Every other key is answered by the real sysctlbyname, untouched.
 *
 * dyld honours DYLD_INSERT_LIBRARIES only for binaries that are neither SIP-protected nor built
 * with the hardened runtime (library validation), which our own runner is not.
 *
 * Written against the ABI only (no SDK headers), so it also compile-checks off macOS:
 *   clang -target arm64-apple-macos11 -dynamiclib -o mac_hide_sme.dylib mac_hide_sme.c
 */
#include <stddef.h>

int sysctlbyname(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static const char sme_prefix[] = "hw.optional.arm.FEAT_SME";

static int is_sme_key(const char *name) {
    return name != NULL && __builtin_strncmp(name, sme_prefix, sizeof sme_prefix - 1) == 0;
}

static int hide_sme_sysctlbyname(const char *name, void *oldp, size_t *oldlenp, void *newp,
                                 size_t newlen) {
    /* dyld does not interpose calls made from the interposing image, so this is the real one. */
    int rc = sysctlbyname(name, oldp, oldlenp, newp, newlen);
    if (rc == 0 && is_sme_key(name) && oldp != NULL && oldlenp != NULL) {
        __builtin_memset(oldp, 0, *oldlenp);
    }
    return rc;
}

/* dyld's interpose table: {replacement, replacee} pairs in the __DATA,__interpose section. */
struct interpose {
    const void *replacement;
    const void *replacee;
};

__attribute__((used, section("__DATA,__interpose"))) static const struct interpose
    interpose_sysctlbyname = {(const void *)hide_sme_sysctlbyname, (const void *)sysctlbyname};
