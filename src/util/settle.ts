// Side-by-side steps whose failure must not leave the others running unseen.

/**
 * Waits until every task has settled, then returns their values, or throws
 * the first failure in task order. Unlike Promise.all, nothing is still
 * running when the caller reacts to a failure (a rollback, an error report).
 */
export async function settleAll<T>(tasks: readonly Promise<T>[]): Promise<T[]> {
  const settled = await Promise.allSettled(tasks);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}
