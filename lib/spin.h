/*
 * spin: a bounded spin before a thread sleeps on an event that is usually
 * quick (the session's turns, an RPC's completion).
 *
 * On a virtual machine an idle core halts, and waking a thread that slept
 * on it cost 40-50 us here, where a loopback round trip of the tiny model
 * is 100 us: the binary made 7,371 steps/s sleeping in gRPC's wait and
 * 12,608 spinning in it. A waiter keeps the share of its recent waits
 * that ended within the budget (a hit share: each side of a session its
 * own, the RPC client one for the process) and spins only while most
 * did, so a wait of milliseconds (a CNN's step, a sync barrier, a large
 * pull) sleeps at once after a few.
 *
 * The budget is DTRAIN_SPIN_US (microseconds, default DT_SPIN_US; 0 never
 * spins: a machine whose cores are all busy with other work), read once
 * a process. Threads: every function may be called from any thread.
 */
#ifndef DT_SPIN_H
#define DT_SPIN_H

#define DT_SPIN_US 300
#define DT_SPIN_US_MAX 100000

/* The budget in microseconds (0: never spin). A DTRAIN_SPIN_US that is
 * not 0..DT_SPIN_US_MAX is a warning naming it, once, and the default. */
long dt_spin_budget_us(void);

/* A waiter's hit share starts here: spin at first. */
#define DT_SPIN_FIRST_HITS 1.0

/* Whether a waiter with this hit share spins before it sleeps. */
int dt_spin_worth(double hits);

/* The end of a spin begun now, on dt_now_secs's clock. */
double dt_spin_deadline(void);

/* Folds a wait begun at t0 (a dt_now_secs stamp) into *hits (weight 1/8:
 * a waiter whose waits are all longer than the budget stops spinning
 * after 6 of them). */
void dt_spin_note(double *hits, double t0);

/* A session's program spins through each of its steps' round trips, so
 * the core is awake for the answer already: while one runs (covered > 0)
 * the RPC client's waits sleep at once rather than spin beside it (two
 * spinning threads and the ps on 2 cores were slower than one). delta:
 * +1 before a session's loop thread starts, -1 when it ends. */
void dt_spin_cover(int delta);
int dt_spin_covered(void);

/* A pause for the loop of a spin (the CPU's spin-wait hint). */
void dt_spin_relax(void);

#endif
