/*
 * hide_sme.so — LD_PRELOAD library that makes an aarch64 Linux process believe its CPU has no
 * SME/SME2, so the *same* runner binary gives the "sme2-off" variant.
 *
 * Why this works: XNNPACK asks cpuinfo once per process, and cpuinfo reads the hardware
 * capabilities with getauxval(AT_HWCAP / AT_HWCAP2); /proc/cpuinfo is not consulted. Interposing
 * getauxval and clearing every SME-related bit hides SME1 *and* SME2 (clearing only SME2 would let
 * XNNPACK fall back to SME1 kernels). Everything else the CPU reports is passed through unchanged,
 * so the only difference between the two variants is what this function answers.
 *
 * Bit positions: Linux arch/arm64/include/uapi/asm/hwcap.h (the kernel's user ABI); the comments
 * name each bit as that header does. qemu-aarch64 11 with `-cpu max,sme=off` clears exactly the
 * AT_HWCAP and AT_HWCAP2 bits below and no others, which provisioning re-checks.
 */
#include <sys/auxv.h>

#ifndef AT_HWCAP3
#define AT_HWCAP3 29 /* include/uapi/linux/auxvec.h; newer than the glibc this may build with */
#endif

#define BIT(n) (1UL << (n))
#define BITS(lo, hi) ((~0UL >> (63 - (hi))) & (~0UL << (lo)))

/* AT_HWCAP: SME2P2 (42), SME_SBITPERM (43), SME_AES (44), SME_SFEXPA (45), SME_STMOP (46),
 * SME_SMOP4 (47). */
#define SME_HWCAP BITS(42, 47)

/* AT_HWCAP2: SME (23), SME_I16I64, SME_F64F64, SME_I8I32, SME_F16F32, SME_B16F32, SME_F32F32,
 * SME_FA64 (24-30); SME2 (37), SME2P1, SME_I16I32, SME_BI32I32, SME_B16B16, SME_F16F16 (38-42);
 * SME_LUTV2, SME_F8F16, SME_F8F32, SME_SF8FMA, SME_SF8DP4, SME_SF8DP2 (57-62). */
#define SME_HWCAP2 (BITS(23, 30) | BITS(37, 42) | BITS(57, 62))

/* AT_HWCAP3: SME_LUT6 (6), SME2P3 (7) — the newest kernels only; clearing an unset bit is a no-op. */
#define SME_HWCAP3 (BIT(6) | BIT(7))

/* glibc's own entry point behind getauxval (exported since glibc 2.16/2.17 on aarch64). */
extern unsigned long __getauxval(unsigned long type);

unsigned long getauxval(unsigned long type) {
    unsigned long value = __getauxval(type);
    switch (type) {
    case AT_HWCAP:
        return value & ~SME_HWCAP;
    case AT_HWCAP2:
        return value & ~SME_HWCAP2;
    case AT_HWCAP3:
        return value & ~SME_HWCAP3;
    default:
        return value;
    }
}
