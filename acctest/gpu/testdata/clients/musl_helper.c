/* A musl helper for the fence's GPU client matrix: a task's launcher built against musl (as in an
 * Alpine image). It must start under the fence's LD_PRELOAD, say who it is, and exec the glibc
 * client it is given, which the fence then serves as usual. Built by clients.sh --build with
 * musl-gcc and run through musl's loader, which is carried beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: musl-helper PROGRAM [ARGS...]\n");
		return 2;
	}
	fprintf(stderr, "musl-helper[%d]: started under LD_PRELOAD=%s\n", (int)getpid(), getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
	fflush(stderr);
	execvp(argv[1], argv + 1);
	perror("musl-helper: exec");
	return 127;
}
