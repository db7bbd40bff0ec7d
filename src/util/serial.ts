// A queue of async jobs that run one at a time, in the order they were queued.

export class Serial {
  private tail: Promise<unknown> = Promise.resolve();

  /** Runs `job` once every job queued before it has settled; a failed job does not stop the queue. */
  run<T>(job: () => Promise<T>): Promise<T> {
    const run = this.tail.then(job, job);
    this.tail = run.catch(() => {});
    return run;
  }
}
