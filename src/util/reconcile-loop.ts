// When the daemon reconciles: as soon as a change is seen (requests made in
// one turn of the event loop make one pass: the events one read of a watch
// brought are one reconcile; there is no waiting window, it would only delay
// every change), every interval, and never two passes at once: a request
// while one runs makes it run once more afterwards (a burst of events is
// then one pass, however long it lasts), and the next periodic pass is armed
// only when the previous one has finished (setInterval would stack passes
// behind a slow store).
//
// Passes are "full" (at start, periodic: compare with the world and repair
// drift, however long it takes) or "changes" (a change was seen: apply just
// that, cheaply). A full pass asked for while one runs is not lost: the pass
// after is full.

export class ReconcileLoop {
  private soon?: NodeJS.Immediate;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  /** The pass to run once the one running has finished. */
  private again?: { why: string; full: boolean };
  private stopped = false;
  private pendingFull = false;
  private pendingWhy = '';

  /**
   * `pass` reconciles once (it never throws: it logs what failed). Every
   * `intervalMs`, `beforePeriodic` runs (housekeeping), then a full pass.
   */
  constructor(
    private readonly pass: (why: string, full: boolean) => Promise<void>,
    private intervalMs: number,
    private readonly beforePeriodic: () => Promise<void>,
  ) {}

  /** A pass now, or once more after the one running; resolves when it is done. */
  run(why: string, full = true): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) {
      this.again = { why, full: full || !!this.again?.full };
      return this.running;
    }
    this.running = (async () => {
      try {
        let next: { why: string; full: boolean } | undefined = { why, full };
        while (next && !this.stopped) {
          this.again = undefined;
          await this.pass(next.why, next.full);
          next = this.again;
        }
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  /**
   * A pass once this turn of the event loop is over (every request of the
   * turn makes one pass): a changes pass, unless `full` (or a full one was
   * asked for meanwhile).
   */
  request(why: string, full = false): void {
    if (this.stopped) return;
    this.pendingFull ||= full;
    this.pendingWhy = why;
    this.soon ??= setImmediate(() => {
      this.soon = undefined;
      const wantFull = this.pendingFull;
      this.pendingFull = false;
      void this.run(this.pendingWhy, wantFull);
    });
  }

  /** Starts the periodic passes, the first one interval from now. */
  startPeriodic(): void {
    if (!this.stopped) this.timer = setTimeout(() => void this.tick(), this.intervalMs);
  }

  /** Another period from now on, counted from now (or from the end of the periodic pass running). */
  setPeriod(ms: number): void {
    this.intervalMs = ms;
    if (this.timer && !this.stopped) {
      clearTimeout(this.timer);
      this.startPeriodic();
    }
  }

  private async tick(): Promise<void> {
    this.timer = undefined; // fired: a new period (setPeriod) waits for this pass to end
    try {
      await this.beforePeriodic();
      await this.run('periodic reconcile');
    } finally {
      this.startPeriodic();
    }
  }

  /** No pass starts from now on; resolves when the one running (if any) has finished. */
  stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearImmediate(this.soon);
    return this.running?.catch(() => {}) ?? Promise.resolve();
  }
}
