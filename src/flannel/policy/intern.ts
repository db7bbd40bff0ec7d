// One object for equal values: the pods of a Deployment have the same labels
// and container ports, and every node's daemon keeps every pod of the
// cluster (docs/network-policy.md, "What is kept of each pod"). A value is
// held weakly: when no pod has it any more it goes, and so does its entry.

export class Interner<T extends object> {
  private readonly byKey = new Map<string, WeakRef<T>>();
  private readonly gone = new FinalizationRegistry<string>((key) => {
    if (!this.byKey.get(key)?.deref()) this.byKey.delete(key);
  });

  /** The object kept for `key`, or `make()`'s, kept from now on. */
  get(key: string, make: () => T): T {
    const had = this.byKey.get(key)?.deref();
    if (had) return had;
    const value = make();
    this.byKey.set(key, new WeakRef(value));
    this.gone.register(value, key);
    return value;
  }
}

/** Strings of a small set (namespaces, nodes): one copy each. */
export class StringPool {
  private readonly pool = new Map<string, string>();

  get(s: string): string {
    const had = this.pool.get(s);
    if (had !== undefined) return had;
    this.pool.set(s, s);
    return s;
  }
}
