//go:build clib

/*
 * The host program's signal handlers run on the alternate signal stack.
 *
 * The Go runtime in this library runs Go code on the program's threads
 * (every verbs call, and its own threads), on goroutine stacks of a few
 * kilobytes. A handler installed without SA_ONSTACK runs on whatever
 * stack the thread is on when the signal comes: inside a verbs call that
 * is a goroutine's, and a handler that needs more than what is left of
 * it writes over the memory beyond (the Go runtime documents the rule:
 * non-Go code that installs handlers must use SA_ONSTACK). perftest, for
 * one, installs its SIGALRM handler with signal(), which does not; a C
 * server over the library crashed in the Go runtime after a SIGALRM.
 *
 * So the library defines sigaction and signal under the C library's own
 * symbol version (SRD_LIBC_SIGVER, which clib/build.sh finds and adds to
 * the version script), as non-default versions: the dynamic linker binds
 * a program's references, which name that version, to the first
 * definition in load order, and libibverbs.so.1 comes before libc.so.6;
 * the static linker never binds to a non-default version, so a program
 * compiled against this library still takes sigaction from the C
 * library, and runs over rdma-core's. Here a handler gains SA_ONSTACK
 * before the C library's sigaction installs it. Go's runtime gives every
 * thread that runs Go code an alternate stack; on other threads the flag
 * changes nothing (no alternate stack: the handler runs on the thread's
 * own, full-size stack). Nothing else changes: SIG_DFL and SIG_IGN pass
 * as they are, and signal() keeps glibc's BSD semantics (SA_RESTART, the
 * signal blocked while its handler runs).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

/* Global (the version script keeps them local): a .symver alias of a
   static function would be local too. */
int srd_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
sighandler_t srd_signal(int sig, sighandler_t handler);

typedef int (*srd_sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static srd_sigaction_fn srd_real_sigaction(void)
{
	static srd_sigaction_fn fn;
	srd_sigaction_fn f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);

	if (!f) {
		f = (srd_sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
		__atomic_store_n(&fn, f, __ATOMIC_RELEASE);
	}
	return f;
}

static int srd_is_handler(const struct sigaction *act)
{
	if (act->sa_flags & SA_SIGINFO)
		return act->sa_sigaction != NULL;
	return act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
}

int srd_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	srd_sigaction_fn real = srd_real_sigaction();

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (act && !(act->sa_flags & SA_ONSTACK) && srd_is_handler(act)) {
		struct sigaction a = *act;

		a.sa_flags |= SA_ONSTACK;
		return real(sig, &a, old);
	}
	return real(sig, act, old);
}

sighandler_t srd_signal(int sig, sighandler_t handler)
{
	struct sigaction a, old;

	a.sa_handler = handler;
	sigemptyset(&a.sa_mask);
	if (sig > 0 && sig < NSIG && sigaddset(&a.sa_mask, sig) < 0)
		return SIG_ERR;
	a.sa_flags = SA_RESTART;
	if (srd_sigaction(sig, &a, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

/* srd_handler_interrupts reports whether a signal other than SIGURG has
 * a handler installed without SA_RESTART: one whose signal ends a
 * blocking read() with EINTR. */
static int srd_handler_interrupts(void)
{
	srd_sigaction_fn real = srd_real_sigaction();

	for (int s = 1; real && s < NSIG; s++) {
		struct sigaction a;

		if (s == SIGURG || s == SIGKILL || s == SIGSTOP)
			continue;
		if (real(s, NULL, &a) == 0 && srd_is_handler(&a) && !(a.sa_flags & SA_RESTART))
			return 1;
	}
	return 0;
}

/*
 * srd_wait_readable waits in poll() for p's descriptor the way a blocking
 * read() of it waits: rdma-core's ibv_get_cq_event is such a read.
 *
 * The Go runtime sends SIGURG to a thread that runs Go code to preempt
 * it, and a C thread that calls into the library is one: sysmon found its
 * P (kept between its calls into Go) running for 10 ms and signalled it,
 * sometimes while the thread was back in C and asleep here. A read()
 * restarts after a handler installed with SA_RESTART, as Go's are, but
 * poll() never restarts: ibv_get_cq_event failed with EINTR, and perftest
 * stopped ("Couldn't get CQ event") while its peer waited for ever. So
 * SIGURG is held off while the thread waits (ppoll's mask; it comes when
 * the wait ends, and the runtime's handler sees the thread in C and
 * ignores it), and another signal ends the wait with EINTR only if a
 * handler without SA_RESTART is installed (which, not knowing the
 * signal, is the most a read() could do). A program's own SIGURG waits
 * for the end of the wait.
 */
int srd_wait_readable(struct pollfd *p)
{
	sigset_t m;

	pthread_sigmask(SIG_BLOCK, NULL, &m);
	sigaddset(&m, SIGURG);
	for (;;) {
		int r = ppoll(p, 1, NULL, &m);

		if (r >= 0 || errno != EINTR || srd_handler_interrupts())
			return r;
	}
}

#ifdef SRD_LIBC_SIGVER
__asm__(".symver srd_sigaction, sigaction@" SRD_LIBC_SIGVER);
__asm__(".symver srd_signal, signal@" SRD_LIBC_SIGVER);
#endif
