/* parse_size reads the test tools' sizes: a byte count with an optional K, M or G suffix. */
#ifndef GF_TEST_PARSE_SIZE_H
#define GF_TEST_PARSE_SIZE_H

#include <stdint.h>
#include <stdlib.h>

static inline uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t n = strtoull(s, &end, 10);
	switch (*end) {
	case 'K': return n << 10;
	case 'M': return n << 20;
	case 'G': return n << 30;
	default: return n;
	}
}

#endif
