/* inplace: ibv_reg_mr of a C program's buffer on shm0 registers its pages
 * in place (docs/shm.md, "Memory registered in place"), as
 * /proc/self/maps shows:
 *
 *   1. whole pages of a malloc'd buffer become a shared mapping of a
 *      memfd, same address, same bytes; ibv_dereg_mr makes them private
 *      again, bytes kept;
 *   2. a buffer that is not whole pages stays as it was (copies);
 *   3. while another device (DEV) registers the same pages, ibv_dereg_mr
 *      on shm0 leaves them shared (moving them could lose that device's
 *      writes), and a registration of pages another one uses is not
 *      moved;
 *   4. regions the program leaves registered are deregistered by
 *      ibv_close_device by the same rule: pages made private again, but
 *      left shared while the other device has them.
 *
 *   inplace -d DEV
 *
 * clib/test.sh runs it over the library; exit status 0 means every check
 * held.
 */
#define TCPX_PROG "inplace"
#include "tcpx.h"
#include <stdint.h>

static long page;

static void fail(const char *what, long a, long b)
{
	fprintf(stderr, "inplace: %s (%ld, %ld)\n", what, a, b);
	exit(1);
}

/* perms returns the permissions /proc/self/maps gives the page at p
 * ("rw-p" private, "rw-s" shared), and in path its path. */
static void perms(const void *p, char out[5], char path[256])
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	strcpy(out, "none");
	path[0] = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long s, e;
		char pm[5];
		int off = 0;

		if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &s, &e, pm, &off) < 3)
			continue;
		if ((uintptr_t)p >= s && (uintptr_t)p < e) {
			strcpy(out, pm);
			snprintf(path, 256, "%s", off ? line + off : "");
			break;
		}
	}
	if (f)
		fclose(f);
}

static void expect(const void *p, const char *want, const char *what)
{
	char pm[5], path[256];

	perms(p, pm, path);
	if (strcmp(pm, want) != 0) {
		fprintf(stderr, "inplace: %s: the pages are %s %s, want %s\n", what, pm, path, want);
		exit(1);
	}
}

static unsigned char *pages(int n)
{
	void *p;

	if (posix_memalign(&p, page, n * page))
		die("posix_memalign");
	for (long i = 0; i < n * page; i++)
		((unsigned char *)p)[i] = (unsigned char)(i * 7 + 1);
	return p;
}

/* reg registers n bytes at p on pd for local and remote access, dereg
 * deregisters; either dies on failure. */
static struct ibv_mr *reg(struct ibv_pd *pd, void *p, long n)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, p, n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);

	if (!mr)
		die("ibv_reg_mr");
	return mr;
}

static void dereg(struct ibv_mr *mr)
{
	if (ibv_dereg_mr(mr))
		die("ibv_dereg_mr");
}

static void same_bytes(const unsigned char *p, int n, const char *what)
{
	for (long i = 0; i < n * page; i++)
		if (p[i] != (unsigned char)(i * 7 + 1))
			fail(what, i, p[i]);
}

int main(int argc, char **argv)
{
	const char *devname = "softrdma_lo";
	struct ibv_context *shm, *other;
	struct ibv_pd *spd, *opd;
	struct ibv_mr *mr, *mr2;
	unsigned char *a, *b, *c;
	int opt;

	while ((opt = getopt(argc, argv, "d:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		default: fprintf(stderr, "usage: inplace -d DEV\n"); return 2;
		}
	}
	page = sysconf(_SC_PAGESIZE);
	shm = open_device("shm0");
	other = open_device(devname);
	spd = ibv_alloc_pd(shm);
	opd = ibv_alloc_pd(other);
	if (!spd || !opd)
		die("ibv_alloc_pd");

	/* 1. Whole pages, in place and back. */
	a = pages(4);
	expect(a, "rw-p", "a fresh buffer");
	mr = reg(spd, a, 4 * page);
	expect(a, "rw-s", "registered on shm0");
	expect(a + 3 * page, "rw-s", "registered on shm0, last page");
	if ((void *)(uintptr_t)mr->addr != a)
		fail("the region's address moved", (long)mr->addr, (long)(uintptr_t)a);
	same_bytes(a, 4, "registered: byte differs");
	a[5] = 99; /* still the program's, writable */
	a[5] = (unsigned char)(5 * 7 + 1);
	dereg(mr);
	expect(a, "rw-p", "deregistered");
	same_bytes(a, 4, "deregistered: byte differs");

	/* 2. Not whole pages: left as they were. */
	mr = reg(spd, a + 1, 2 * page);
	expect(a, "rw-p", "partial pages registered on shm0");
	dereg(mr);

	/* 3. Another device's registration of the same pages. */
	b = pages(2);
	mr = reg(spd, b, 2 * page);
	mr2 = reg(opd, b, 2 * page);
	dereg(mr);
	expect(b, "rw-s", "deregistered on shm0 while the other device has the pages");
	same_bytes(b, 2, "shared after deregistration: byte differs");
	dereg(mr2);
	c = pages(2);
	mr2 = reg(opd, c, 2 * page);
	mr = reg(spd, c, 2 * page);
	expect(c, "rw-p", "registered on shm0 while the other device has the pages");
	dereg(mr);
	dereg(mr2);

	/* 4. Left registered: ibv_close_device deregisters them. */
	b = pages(2);
	reg(spd, a, 4 * page);
	reg(spd, b, 2 * page);
	mr2 = reg(opd, b, 2 * page);
	expect(a, "rw-s", "registered on shm0 again");
	expect(b, "rw-s", "registered on shm0 and the other device");
	if (ibv_close_device(shm))
		die("ibv_close_device");
	expect(a, "rw-p", "after ibv_close_device");
	same_bytes(a, 4, "after ibv_close_device: byte differs");
	expect(b, "rw-s", "after ibv_close_device, while the other device has the pages");
	same_bytes(b, 2, "after ibv_close_device, shared: byte differs");
	dereg(mr2);

	ibv_dealloc_pd(opd);
	ibv_close_device(other);
	printf("inplace: in place and back, partial pages left, shared pages kept, closed device\n");
	return 0;
}
