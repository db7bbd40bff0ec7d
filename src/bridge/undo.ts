// ADD's rollback: each step that changed something registers how to take it
// back; a failure later runs them newest first. A step can be cancelled when
// what it made turns out not to be this call's to take back.

export interface UndoStep {
  /** This step is not run on rollback. */
  cancel(): void;
}

export class Undo {
  private readonly steps: { run: () => Promise<unknown>; cancelled: boolean }[] = [];

  push(run: () => Promise<unknown>): UndoStep {
    const step = { run, cancelled: false };
    this.steps.push(step);
    return { cancel: () => void (step.cancelled = true) };
  }

  /** Runs every step not cancelled, newest first; a failing step is reported and the rest still run. */
  async rollback(report: (err: Error) => void): Promise<void> {
    for (const step of this.steps.splice(0).reverse()) {
      if (step.cancelled) continue;
      try {
        await step.run();
      } catch (err) {
        report(err as Error);
      }
    }
  }
}
