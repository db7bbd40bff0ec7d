// Log lines carry data from the lease store (etcd keys, values, file names),
// which anyone with write access to it controls: a key holding "\n" followed by
// a timestamp would forge a log line of its own. Untrusted strings are quoted
// where they are logged (JSON.stringify), and every line goes through
// printable() on its way out as well.

/** `s` with control characters (and U+2028/U+2029, line breaks to some readers) escaped as \uXXXX. */
export function printable(s: string): string {
  return s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
