// The one way tests wait: for a condition, never for a fixed time. A busy
// machine only makes the wait longer, so bounds are generous (tens of
// seconds); what a wait took is returned for tests that report a latency
// (latency goals belong in `make bench`, which compares in one run).

/**
 * Polls `fn` until it returns a truthy value (a throw counts as not yet);
 * returns that value and how long it took, or throws naming `what` (and the
 * last error) after `timeoutMs`.
 */
export async function waitFor<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 20_000, everyMs = 10): Promise<{ value: T; ms: number }> {
  const t0 = Date.now();
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value) return { value, ms: Date.now() - t0 };
    } catch (err) {
      last = err;
    }
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Waits as waitFor does and prints what the wait took: "<what>: 412 ms". */
export async function waitAndReport<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 30_000, everyMs = 50): Promise<{ value: T; ms: number }> {
  const r = await waitFor(what, fn, timeoutMs, everyMs);
  console.log(`${what}: ${r.ms} ms`);
  return r;
}
