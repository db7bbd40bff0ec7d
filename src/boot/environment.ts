// A root plugin runs with whatever environment its runtime passes on. Node
// reads some NODE_* variables before any of our code runs; those are shut out
// before the start: the scripts' shebang unsets them, and the standalone
// executable (whose SEA config already ignores NODE_OPTIONS and compiles its
// main script from its own code cache, not NODE_COMPILE_CACHE) starts itself
// again without them when one is set (NODE_EXTRA_CA_CERTS would otherwise
// stay trusted by every TLS connection). The rest are read later, when used
// (NODE_TLS_REJECT_UNAUTHORIZED, NODE_REDIRECT_WARNINGS, NODE_DEBUG, ...):
// removed here, first thing, so that they change nothing in this process and
// reach none of its children (delegated plugins, ip, iptables). The same
// restart gives the node daemon glibc's settings (malloc-tunables.ts).

/** The variables Node reads at start-up, before a script runs: unset by the scripts' shebang (build.mjs). */
export const STARTUP_NODE_VARIABLES = [
  'NODE_OPTIONS',
  'NODE_EXTRA_CA_CERTS',
  'NODE_COMPILE_CACHE',
  'NODE_V8_COVERAGE',
  'NODE_USE_ENV_PROXY',
  'NODE_ICU_DATA',
  'NODE_CHANNEL_FD',
  'NODE_UNIQUE_ID',
  'NODE_PATH',
  'NODE_PENDING_DEPRECATION',
] as const;

/**
 * NODE_* variables that are ours to read, not Node's: flanneld's NODE_NAME
 * (`--node-name`, which kube-flannel-style manifests set from spec.nodeName).
 * Node itself reads no variable of these names.
 */
export const KEPT_NODE_VARIABLES: readonly string[] = ['NODE_NAME'];

/**
 * Set in the environment of a restart made for `startWith` (below); the
 * restarted start removes it and does not restart for `startWith` again,
 * whatever it finds: glibc may drop GLIBC_TUNABLES from a secure-mode process
 * (setuid, file capabilities), and a restart must not repeat forever.
 */
export const RESTARTED_VARIABLE = 'CNI_TS_RESTARTED';

type Execve = (file: string, args: string[], env: Record<string, string | undefined>) => never;

/**
 * Removes every NODE_* variable but KEPT_NODE_VARIABLES from this process's
 * environment and sets those of `startWith` (variables read at start-up by
 * others: glibc's GLIBC_TUNABLES). With `restart` (the standalone executable),
 * when one Node read at start-up was set, or one of `startWith` was not as
 * given, replaces this process with a fresh start of the same executable in
 * that environment (process.execve: same pid, same descriptors); at most once
 * for `startWith` (RESTARTED_VARIABLE).
 */
export function ignoreNodeEnvironment(restart: boolean, env: NodeJS.ProcessEnv = process.env, startWith: Readonly<Record<string, string>> = {}): void {
  const nodeReadAtStart = STARTUP_NODE_VARIABLES.some((name) => env[name] !== undefined);
  const coverage = env.NODE_V8_COVERAGE !== undefined;
  for (const name of Object.keys(env)) if (name.startsWith('NODE_') && !KEPT_NODE_VARIABLES.includes(name)) delete env[name];
  const restarted = env[RESTARTED_VARIABLE] !== undefined;
  delete env[RESTARTED_VARIABLE];
  const changed = restarted ? [] : Object.entries(startWith).filter(([name, value]) => env[name] !== value);
  for (const [name, value] of changed) env[name] = value;
  if ((!nodeReadAtStart && changed.length === 0) || !restart) return;
  // Coverage NODE_V8_COVERAGE started is written on the way out, execve included: stop it first.
  if (coverage) (require('node:v8') as typeof import('node:v8')).stopCoverage();
  const execve = (process as unknown as { execve?: Execve }).execve;
  try {
    if (execve) execve(process.execPath, [process.argv0, ...process.argv.slice(2)], changed.length ? { ...env, [RESTARTED_VARIABLE]: '1' } : env);
  } catch {
    // not replaced: go on in this process (without the variables Node reads later)
  }
}
