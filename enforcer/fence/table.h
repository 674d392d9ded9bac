/* What the table's C files share among themselves (table.c: files and slots, charge.c: the
 * allocation rules, tasks.c: the enforcer's side): internal, not part of state.h's API. */
#ifndef GPUFRAC_FENCE_TABLE_H
#define GPUFRAC_FENCE_TABLE_H

#include <stdint.h>

#include "state.h"

/* gf_held is what task k holds of the GPU: its guarantee, or its use where that is more. */
static inline uint64_t gf_held(const struct gf_task *k) { return k->used > k->cap ? k->used : k->cap; }

/* gf_find_task is the live task slot whose token hash is hash, or -1. */
int gf_find_task(const struct gf_table *t, const uint8_t *hash);

/* gf_give_back frees process slot i and returns its bytes to its task. Called under the lock. */
void gf_give_back(struct gf_table *t, int i);

#endif
