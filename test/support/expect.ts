// Small waiting and failure-catching helpers the unit tests share.

type ErrorClass<E extends Error> = abstract new (...args: never[]) => E;

/** Polls `fn` every 10 ms until it is true; returns how long that took, or throws naming `what` after `ms`. */
export async function until(what: string, fn: () => boolean | Promise<boolean>, ms = 3000): Promise<number> {
  const t0 = Date.now();
  while (!(await fn())) {
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return Date.now() - t0;
}

/** The error `fn` throws, which must be a `kind`; fails when it returns instead. */
export function thrown<E extends Error>(kind: ErrorClass<E>, fn: () => unknown): E {
  try {
    fn();
  } catch (err) {
    if (err instanceof kind) return err;
    throw err;
  }
  throw new Error(`expected a ${kind.name}, got success`);
}

/** The error `p` rejects with, which must be a `kind`; fails when it resolves instead. */
export async function rejected<E extends Error>(kind: ErrorClass<E>, p: Promise<unknown>): Promise<E> {
  try {
    await p;
  } catch (err) {
    if (err instanceof kind) return err;
    throw err;
  }
  throw new Error(`expected a ${kind.name}, got success`);
}
