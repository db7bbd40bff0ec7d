// When the daemon reconciles: soon after a change is seen (requests within
// 20 ms make one pass: a burst of watch events is one reconcile), every
// interval, and never two passes at once: a request while one runs makes it
// run once more afterwards, and the next periodic pass is armed only when the
// previous one has finished (setInterval would stack passes behind a slow
// store).

const DEBOUNCE_MS = 20;

export class ReconcileLoop {
  private debounce?: NodeJS.Timeout;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private again = false;
  private stopped = false;

  /**
   * `pass` reconciles once (it never throws: it logs what failed). Every
   * `intervalMs`, `beforePeriodic` runs (housekeeping), then a pass.
   */
  constructor(
    private readonly pass: (why: string) => Promise<void>,
    private readonly intervalMs: number,
    private readonly beforePeriodic: () => Promise<void>,
  ) {}

  /** A pass now, or once more after the one running; resolves when it is done. */
  run(why: string): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.pass(why);
        } while (this.again && !this.stopped);
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  /** A pass soon (debounced). */
  request(why: string): void {
    if (this.stopped) return;
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => void this.run(why), DEBOUNCE_MS);
  }

  /** Starts the periodic passes, the first one interval from now. */
  startPeriodic(): void {
    if (!this.stopped) this.timer = setTimeout(() => void this.tick(), this.intervalMs);
  }

  private async tick(): Promise<void> {
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
    clearTimeout(this.debounce);
    return this.running?.catch(() => {}) ?? Promise.resolve();
  }
}
