/* The control copy of a table (control.c), for table.c, charge.c and tasks.c: internal, not part of state.h's API. */
#ifndef GPUFRAC_FENCE_CONTROL_H
#define GPUFRAC_FENCE_CONTROL_H

#include "state.h"

/* gf_control_open maps the control copy of the table at path (in the directory beside the
 * table's, "<dir>-caps"): the enforcer (writable) creates it, a task maps it read-only and
 * goes without it when there is none (a table of an older enforcer). */
int gf_control_open(struct gf_map *m, const char *path, int writable, char *err, size_t errlen);
void gf_control_close(struct gf_map *m);
/* gf_control_write copies what only the enforcer writes from the table into the copy; under
 * the lock. */
void gf_control_write(struct gf_map *m);
/* gf_control_restore writes back into the table what a tenant changed of what only the
 * enforcer writes; under the lock, before the table's rules read it: the header and one task
 * slot (its hash aside), or with task -1 every slot with its hash. */
void gf_control_restore(struct gf_map *m, int task);

#endif
