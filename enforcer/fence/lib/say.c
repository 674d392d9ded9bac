/* The fence's messages, the bottom of the library's files: every other file may speak. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "say.h"

/* Once per cause (the callers keep count), on stderr, never through stdio buffers. */
void say(const char *fmt, ...)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "gpufrac-fence[%d]: ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	(void)!write(2, buf, (size_t)n);
}
