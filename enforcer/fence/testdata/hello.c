/* A program that never reaches for a GPU, built with musl in the fence's tests: under the
 * preload it must start, run and exit 0 with nothing from the fence on stderr. */
#include <stdio.h>

int main(int argc, char **argv)
{
	printf("hello");
	for (int i = 1; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\n");
	return 0;
}
