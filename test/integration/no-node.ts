// The standalone executables, and a host view without Node.js to run them in.
import { join } from 'node:path';
import { ROOT } from './helpers';

export const STANDALONE_BIN = join(ROOT, 'dist/bin');

// In the private mount namespace `withoutNode` makes: bind-mounts /dev/null
// (empty, and not executable) over every `node` on the caller's PATH and in
// the usual places, checks that `node` cannot run, then runs the command with
// the caller's PATH, as on a host that never had Node.js.
const HIDE_NODE = `set -e
callers_path=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin
for dir in $(echo "$callers_path" | tr ':' ' ') /usr/local/bin /usr/bin /bin; do
  if [ -e "$dir/node" ]; then mount --bind /dev/null "$dir/node"; fi
done
PATH=$callers_path
if node -e 0 2>/dev/null; then echo "withoutNode: node still runs" >&2; exit 99; fi
exec "$@"`;

/** argv that runs `argv` where Node.js cannot run (a private mount namespace; the rest of the host is unchanged). */
export function withoutNode(argv: readonly string[]): string[] {
  return ['/usr/bin/unshare', '--mount', '--propagation', 'private', '/bin/sh', '-c', HIDE_NODE, 'sh', ...argv];
}
