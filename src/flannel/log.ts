// The daemon's log lines. They carry data from the lease store (etcd keys,
// values, file names), which anyone with write access to it controls: a key
// holding "\n" followed by a timestamp would forge a log line of its own.
// Untrusted strings are quoted where they are logged (JSON.stringify), and
// every line goes through printable() on its way out as well.

/** One log line per call. */
export type Log = (msg: string) => void;

/** `s` with control characters (and U+2028/U+2029, line breaks to some readers) escaped as \uXXXX. */
export function printable(s: string): string {
  return s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Conditions that every pass meets again (a VTEP that cannot be made, a
 * renewal refused, a lease that is ignored) are logged when they appear or
 * their message changes, and once when they are over: not on each pass.
 * Each condition has a key; the reporter remembers the message last logged
 * for it.
 */
export class Reporter {
  private readonly reported = new Map<string, string>();

  constructor(private readonly log: Log) {}

  /** `key`'s condition holds, as `msg`: logged unless it is what was last logged for `key`. */
  report(key: string, msg: string): void {
    if (this.reported.get(key) === msg) return;
    this.reported.set(key, msg);
    this.log(msg);
  }

  /** `key`'s condition is over; `recovered` is logged if it had been reported. */
  clear(key: string, recovered?: string): void {
    if (this.reported.delete(key) && recovered !== undefined) this.log(recovered);
  }

  /** Every condition is over. Returns whether any had been reported. */
  clearAll(): boolean {
    const any = this.reported.size > 0;
    this.reported.clear();
    return any;
  }
}
