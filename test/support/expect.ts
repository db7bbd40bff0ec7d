// Failure-catching helpers the tests share (waiting is test/support/wait.ts).

type ErrorClass<E extends Error> = abstract new (...args: never[]) => E;

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
