/* The fence's messages (say.c). */
#ifndef GPUFRAC_FENCE_SAY_H
#define GPUFRAC_FENCE_SAY_H

/* say writes "gpufrac-fence[pid]: " and the message to stderr. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
