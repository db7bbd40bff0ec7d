// When the daemon reconciles (fake timers): requests of one turn make one pass
// at once (no waiting window), one pass at a time with at most one more
// queued, periodic passes armed only when the previous one ended, a period
// shortened from now, and a stop that waits for the pass in flight.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ReconcileLoop } from '../../../src/util/reconcile-loop';

describe('ReconcileLoop', () => {
  let passes: { why: string; full: boolean; start: number; end?: number }[];
  let passMs: number;
  let housekeeping: number[];
  let loop: ReconcileLoop;

  beforeEach(() => {
    vi.useFakeTimers();
    passes = [];
    passMs = 0;
    housekeeping = [];
    loop = new ReconcileLoop(
      async (why, full) => {
        const p: (typeof passes)[number] = { why, full, start: Date.now() };
        passes.push(p);
        await new Promise((r) => setTimeout(r, passMs));
        p.end = Date.now();
      },
      1000,
      async () => {
        housekeeping.push(Date.now());
      },
    );
  });
  afterEach(async () => {
    const stopped = loop.stop();
    await vi.runAllTimersAsync(); // a pass still in flight ends
    await stopped;
    vi.useRealTimers();
  });

  const overlapping = () => passes.some((p, i) => i > 0 && p.start < passes[i - 1].end!);

  it('requests of one turn make one pass, at once; one made while it runs makes one more after it', async () => {
    passMs = 100;
    const t0 = Date.now();
    for (const why of ['put a', 'put b', 'delete c']) loop.request(why);
    expect(passes).toEqual([]); // not inside the caller's turn
    await vi.advanceTimersByTimeAsync(0);
    expect(passes.map((p) => [p.why, p.start])).toEqual([['delete c', t0]]);
    await vi.advanceTimersByTimeAsync(10);
    loop.request('put d');
    loop.request('put e');
    await vi.advanceTimersByTimeAsync(200);
    expect(passes.map((p) => [p.why, p.start])).toEqual([['delete c', t0], ['put e', t0 + 100]]);
    expect(overlapping()).toBe(false);
  });

  it('a new period counts from now', async () => {
    const t0 = Date.now();
    loop.startPeriodic(); // every 1000 ms
    await vi.advanceTimersByTimeAsync(600);
    loop.setPeriod(100);
    await vi.advanceTimersByTimeAsync(95);
    expect(passes).toEqual([]);
    await vi.advanceTimersByTimeAsync(10);
    expect(passes.map((p) => p.start)).toEqual([t0 + 700]); // not at 1000
    await vi.advanceTimersByTimeAsync(110);
    expect(passes).toHaveLength(2);
    loop.setPeriod(5000);
    await vi.advanceTimersByTimeAsync(4950);
    expect(passes).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(100);
    expect(passes).toHaveLength(3);
  });

  it('changes passes for requests, full ones for runs and periods; a full one asked for meanwhile is not lost', async () => {
    passMs = 100;
    loop.request('put a');
    await vi.advanceTimersByTimeAsync(20);
    expect(passes.map((p) => [p.why, p.full])).toEqual([['put a', false]]);
    loop.request('lease refused', true);
    await vi.advanceTimersByTimeAsync(20); // while the first pass runs
    loop.request('put b'); // a changes request after the full one: still one full pass next
    await vi.advanceTimersByTimeAsync(300);
    expect(passes.map((p) => [p.why, p.full])).toEqual([['put a', false], ['put b', true]]);
    loop.startPeriodic();
    await vi.advanceTimersByTimeAsync(1200);
    expect(passes.at(-1)).toMatchObject({ why: 'periodic reconcile', full: true });
  });

  it('a pass requested while one runs runs once more afterwards, however many requests came', async () => {
    passMs = 100;
    const first = loop.run('start');
    for (let i = 0; i < 5; i++) void loop.run(`change ${i}`);
    await vi.advanceTimersByTimeAsync(250);
    await first;
    expect(passes).toHaveLength(2);
    expect(overlapping()).toBe(false);
  });

  it('periodic passes: housekeeping first, the next one interval after the previous ended (a slow pass never stacks)', async () => {
    passMs = 1500; // longer than the interval
    const t0 = Date.now();
    loop.startPeriodic();
    await vi.advanceTimersByTimeAsync(999);
    expect(passes).toEqual([]);
    await vi.advanceTimersByTimeAsync(1 + 1500 + 1000 + 1500);
    expect(passes.map((p) => [p.why, p.start])).toEqual([
      ['periodic reconcile', t0 + 1000],
      ['periodic reconcile', t0 + 1000 + 1500 + 1000],
    ]);
    expect(housekeeping).toEqual([passes[0].start, passes[1].start]);
    expect(overlapping()).toBe(false);
  });

  it('stop waits for the pass in flight; nothing runs after it', async () => {
    passMs = 300;
    loop.startPeriodic();
    await vi.advanceTimersByTimeAsync(1100); // a periodic pass is running
    loop.request('put x');
    const stopped = loop.stop();
    let done = false;
    void stopped.then(() => (done = true));
    await vi.advanceTimersByTimeAsync(100);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect(done).toBe(true);
    await loop.run('after stop');
    loop.request('after stop');
    loop.startPeriodic();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(passes.map((p) => p.why)).toEqual(['periodic reconcile']);
  });
});
