// A map from a key to the values under it, for keys that nearly always hold
// one value (a VTEP MAC's leases, a subnet's claims): a lone value is held as
// itself, not in a collection of its own. At 5,000 peers a Set or an array
// per key was ~150 bytes each, ~0.7 MiB per index, for the rare key shared.

/** Two values or more under one key (a class of its own: a value may be anything, an array too). */
class Several<V> {
  constructor(readonly values: V[]) {}
}

export class MultiMap<K, V> {
  private readonly map = new Map<K, V | Several<V>>();

  /** Adds `value` under `key` (once: a value already there stays where it is in the order). */
  add(key: K, value: V): void {
    const held = this.map.get(key);
    if (held === undefined && !this.map.has(key)) this.map.set(key, value);
    else if (held instanceof Several) {
      if (!held.values.includes(value)) held.values.push(value);
    } else if (held !== value) this.map.set(key, new Several([held as V, value]));
  }

  /** Takes `value` from under `key`; the key goes with its last value. */
  delete(key: K, value: V): void {
    const held = this.map.get(key);
    if (held instanceof Several) {
      const rest = held.values.filter((v) => v !== value);
      this.map.set(key, rest.length === 1 ? rest[0] : new Several(rest));
    } else if (held === value && this.map.has(key)) this.map.delete(key);
  }

  /** The values under `key`, in the order they came (empty when none). */
  get(key: K): readonly V[] {
    const held = this.map.get(key);
    if (held instanceof Several) return held.values;
    return held === undefined && !this.map.has(key) ? [] : [held as V];
  }

  has(key: K): boolean {
    return this.map.has(key);
  }

  /** The keys holding a value, in the order they came. */
  keys(): IterableIterator<K> {
    return this.map.keys();
  }

  /** Each key's values (get()), key by key. */
  *groups(): IterableIterator<readonly V[]> {
    for (const key of this.map.keys()) yield this.get(key);
  }

  clear(): void {
    this.map.clear();
  }
}
