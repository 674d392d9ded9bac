/*
 * Another LD_PRELOAD library, listed after the fence as a task that sets its own LD_PRELOAD
 * does (docs/enforcement.md: keep the fence in it): it wraps fflush, which client.c calls after
 * every answer, and finds the next definition with dlsym(RTLD_NEXT, ...) in its constructor,
 * which runs before the fence's. Answered its own fflush, it would call itself forever: it says
 * so and exits 9 instead.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

static int (*next_fflush)(FILE *);

__attribute__((constructor)) static void find_next(void)
{
	next_fflush = (int (*)(FILE *))dlsym(RTLD_NEXT, "fflush");
}

int fflush(FILE *f)
{
	if (!next_fflush || next_fflush == fflush) {
		static const char msg[] = "interposer: dlsym(RTLD_NEXT, \"fflush\") answered its own fflush\n";
		(void)!write(2, msg, sizeof msg - 1);
		_exit(9);
	}
	return next_fflush(f);
}
