// A root plugin runs with whatever environment its runtime passes on. Node
// reads some NODE_* variables before any of our code runs; those are shut out
// before the start (the scripts' shebang unsets them; the standalone
// executable's SEA config ignores NODE_OPTIONS and compiles its main script
// from its own code cache, not NODE_COMPILE_CACHE). The rest are read later,
// when used (NODE_TLS_REJECT_UNAUTHORIZED, NODE_REDIRECT_WARNINGS, NODE_DEBUG,
// ...): removed here, first thing, so that they change nothing in this process
// and reach none of its children (delegated plugins, ip, iptables).

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

/** Removes every NODE_* variable from this process's environment. */
export function ignoreNodeEnvironment(env: NodeJS.ProcessEnv = process.env): void {
  // The standalone executable cannot unset it before it starts: stop the
  // coverage V8 began, so nothing is written into that directory at exit.
  if (env.NODE_V8_COVERAGE !== undefined) (require('node:v8') as typeof import('node:v8')).stopCoverage(); // loaded only then
  for (const name of Object.keys(env)) if (name.startsWith('NODE_')) delete env[name];
}
