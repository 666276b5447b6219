/* CRC32C (Castagnoli), as docs/log-format.md specifies for record checksums.
 *
 * The compiled twin of the `crc32c` package call in narad/log/format.py: same
 * polynomial (0x82F63B78 reflected), same initial value and final xor, so the two
 * give identical checksums (tests compare them). Uses the SSE4.2 crc32 instruction
 * when the CPU has it, else a byte-wise table.
 */
#ifndef NARAD_CRC32C_H
#define NARAD_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t narad_crc32c_table[256];
static int narad_crc32c_ready = 0;
static int narad_crc32c_hw = 0;

static void narad_crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        narad_crc32c_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    narad_crc32c_hw = __builtin_cpu_supports("sse4.2");
#endif
    narad_crc32c_ready = 1;
}

static uint32_t narad_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n--)
        crc = narad_crc32c_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2")))
static uint32_t narad_crc32c_hw64(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __builtin_ia32_crc32di(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

/* CRC32C of n bytes at p, continuing the checksum `crc` of the bytes before them
   (0 for a fresh checksum), as the crc32c package's crc32c(data, crc). */
static uint32_t narad_crc32c_update(uint32_t crc, const uint8_t *p, size_t n) {
    if (!narad_crc32c_ready)
        narad_crc32c_init();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (narad_crc32c_hw)
        return ~narad_crc32c_hw64(~crc, p, n);
#endif
    return ~narad_crc32c_sw(~crc, p, n);
}

/* CRC32C of n bytes at p (a fresh checksum, not a continuation). */
static uint32_t narad_crc32c(const uint8_t *p, size_t n) {
    return narad_crc32c_update(0, p, n);
}

#endif
