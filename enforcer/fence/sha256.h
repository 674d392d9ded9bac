/* SHA-256 (FIPS 180-4), for the fence's token hashes: the tables every task maps hold a
 * reservation's hash, never its token, so reading a table does not let one task pass for
 * another. Small and self-contained: the preload library links nothing it need not. */
#ifndef GPUFRAC_FENCE_SHA256_H
#define GPUFRAC_FENCE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define GF_HASH_LEN 32

void gf_sha256(const void *data, size_t len, uint8_t out[GF_HASH_LEN]);

#endif
