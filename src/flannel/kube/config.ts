// Where the Kubernetes API is and how to authenticate to it, found the way
// flanneld finds it (client-go's BuildConfigFromFlags(--kube-api-url,
// --kubeconfig-file)):
//   --kubeconfig-file F   F's current context; --kube-api-url, when given too, replaces its server
//   --kube-api-url only   that URL, no credentials, the server checked against the system CAs
//   neither               in-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
//                         the service account's token and CA
// Token files (in-cluster, or a kubeconfig user's tokenFile) are read again
// for every request: the kubelet rotates projected service account tokens,
// and a re-read per request (the daemon makes few) is simpler than a timer.
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { hasUserInfo, withoutUserInfo } from '../../util/url-text';

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** kube-flannel's network config (--net-config-path). */
export const DEFAULT_NET_CONF_PATH = '/etc/kube-flannel/net-conf.json';

export interface KubeConnection {
  /** The API's base URL: scheme, host, port and any path prefix, without a trailing slash. */
  server: string;
  /** PEM CA bundle the server's certificate must chain to (instead of the system CAs). */
  ca?: Buffer;
  /** For error messages: where `ca` came from. */
  caSource?: string;
  insecureSkipTLSVerify?: boolean;
  /** The name the server's certificate must carry, when it is not the URL's host. */
  tlsServerName?: string;
  /** Client certificate and key (PEM). */
  cert?: Buffer;
  key?: Buffer;
  /** The bearer token for the next request, if any. */
  token?: () => string | undefined;
  /** For log lines: `in-cluster (https://10.96.0.1:443)`, `kubeconfig /etc/kubernetes/kubelet.conf (context default)`. */
  description: string;
}

export interface KubeConfigOptions {
  /** --kubeconfig-file */
  kubeconfigFile?: string;
  /** --kube-api-url */
  apiUrl?: string;
  /** Default: process.env. */
  env?: NodeJS.ProcessEnv;
  /** Default: SERVICE_ACCOUNT_DIR (tests point it elsewhere). */
  serviceAccountDir?: string;
}

/** A configuration that cannot be used; the message names the file, field or variable. */
export class KubeConfigError extends Error {
  override name = 'KubeConfigError';
}

export async function loadKubeConnection(opts: KubeConfigOptions): Promise<KubeConnection> {
  if (opts.apiUrl !== undefined) checkServer(opts.apiUrl, '--kube-api-url');
  if (opts.kubeconfigFile) return fromKubeconfig(opts.kubeconfigFile, opts.apiUrl);
  if (opts.apiUrl) return { server: trimSlash(opts.apiUrl), description: opts.apiUrl };
  return inCluster(opts.env ?? process.env, opts.serviceAccountDir ?? SERVICE_ACCOUNT_DIR);
}

function inCluster(env: NodeJS.ProcessEnv, dir: string): KubeConnection {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) {
    throw new KubeConfigError(
      'no --kubeconfig-file or --kube-api-url given, and not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set for the in-cluster configuration',
    );
  }
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  checkServer(server, 'KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT');
  const caFile = join(dir, 'ca.crt');
  return {
    server,
    ca: readFile(caFile, 'the service account CA'),
    caSource: caFile,
    token: tokenFile(join(dir, 'token'), 'the service account token'),
    description: `in-cluster (${server})`,
  };
}

/**
 * A token read from `file` now (it must be readable) and again for each
 * request; a read that fails later (the file being replaced) keeps the last
 * token, as client-go does.
 */
function tokenFile(file: string, what: string): () => string {
  let last = readFile(file, what).toString().trim();
  if (!last) throw new KubeConfigError(`${what} ${file} is empty`);
  return () => {
    try {
      last = readFileSync(file, 'utf8').trim() || last;
    } catch {
      // keep the previous token: the file is being rotated
    }
    return last;
  };
}

async function fromKubeconfig(file: string, apiUrl: string | undefined): Promise<KubeConnection> {
  const { load } = await import('./yaml-lib');
  let doc: unknown;
  try {
    doc = load(readFile(file, 'kubeconfig').toString());
  } catch (err) {
    if (err instanceof KubeConfigError) throw err;
    throw new KubeConfigError(`kubeconfig ${file} is not YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const fail = (what: string): never => {
    throw new KubeConfigError(`kubeconfig ${file}: ${what}`);
  };
  const cfg = isMap(doc) ? doc : fail('not a kubeconfig (a YAML map with clusters, users and contexts)');
  const contextName = typeof cfg['current-context'] === 'string' && cfg['current-context'] ? cfg['current-context'] : fail('no current-context');
  const context = named(cfg.contexts, contextName, 'context', fail);
  const clusterName = typeof context.cluster === 'string' ? context.cluster : fail(`context "${contextName}" names no cluster`);
  const cluster = named(cfg.clusters, clusterName, 'cluster', fail);
  const user = typeof context.user === 'string' && context.user ? named(cfg.users, context.user, 'user', fail) : {};
  const base = dirname(file);
  // client-go reads relative paths in a kubeconfig from the kubeconfig's directory
  const path = (p: unknown, field: string) => (typeof p === 'string' && p ? (isAbsolute(p) ? p : join(base, p)) : p === undefined ? undefined : fail(`${field} must be a path`));
  const data = (v: unknown, field: string) => {
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || !/^[A-Za-z0-9+/=\s]*$/.test(v)) return fail(`${field} must be base64`);
    return Buffer.from(v, 'base64');
  };

  for (const unsupported of ['proxy-url']) if (cluster[unsupported] !== undefined) fail(`cluster "${clusterName}": ${unsupported} is not supported`);
  for (const unsupported of ['exec', 'auth-provider', 'username', 'password']) {
    if (user[unsupported] !== undefined) fail(`user "${context.user}": ${unsupported} is not supported (use a token, a tokenFile or a client certificate)`);
  }

  const server = apiUrl ?? (typeof cluster.server === 'string' && cluster.server ? cluster.server : fail(`cluster "${clusterName}" has no server`));
  checkServer(server, apiUrl ? '--kube-api-url' : `kubeconfig ${file}: cluster "${clusterName}" server`);
  const conn: KubeConnection = { server: trimSlash(server), description: `kubeconfig ${file} (context ${contextName})` };

  // as in client-go, inline data wins over a file
  const caFile = path(cluster['certificate-authority'], 'certificate-authority');
  const caData = data(cluster['certificate-authority-data'], 'certificate-authority-data');
  if (caData) [conn.ca, conn.caSource] = [caData, `certificate-authority-data of cluster "${clusterName}" in ${file}`];
  else if (caFile) [conn.ca, conn.caSource] = [readFile(caFile, 'certificate-authority'), caFile];
  if (cluster['insecure-skip-tls-verify'] === true) {
    // client-go refuses this pair rather than silently dropping the CA the file names
    if (conn.ca) fail(`cluster "${clusterName}": insecure-skip-tls-verify with a CA (certificate-authority or certificate-authority-data): specifying a root certificates file with the insecure flag is not allowed`);
    conn.insecureSkipTLSVerify = true;
  }
  if (typeof cluster['tls-server-name'] === 'string' && cluster['tls-server-name']) conn.tlsServerName = cluster['tls-server-name'];

  const certFile = path(user['client-certificate'], 'client-certificate');
  const keyFile = path(user['client-key'], 'client-key');
  const cert = data(user['client-certificate-data'], 'client-certificate-data') ?? (certFile ? readFile(certFile, 'client-certificate') : undefined);
  const key = data(user['client-key-data'], 'client-key-data') ?? (keyFile ? readFile(keyFile, 'client-key') : undefined);
  if (!cert !== !key) fail(`user "${context.user}": a client certificate needs its key and the other way round`);
  if (cert && key) Object.assign(conn, { cert, key });

  if (typeof user.token === 'string' && user.token) {
    const token = user.token;
    conn.token = () => token;
  } else if (user.tokenFile !== undefined) conn.token = tokenFile(path(user.tokenFile, 'tokenFile')!, 'tokenFile');
  return conn;
}

/** A warning to log when the connection does not verify who the API server is; undefined when it does. */
export function verificationWarning(conn: KubeConnection): string | undefined {
  if (conn.server.startsWith('http:')) return `WARNING: the Kubernetes API ${conn.server} is plain HTTP: nothing is encrypted or verified`;
  if (conn.insecureSkipTLSVerify) return `WARNING: the Kubernetes API server's certificate is not verified (insecure-skip-tls-verify in ${conn.description})`;
  return undefined;
}

type YamlMap = Record<string, unknown>;

const isMap = (v: unknown): v is YamlMap => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The `field` map of the entry called `name` in a kubeconfig list (`clusters: [{name, cluster: {...}}]`). */
function named(list: unknown, name: string, field: 'context' | 'cluster' | 'user', fail: (what: string) => never): YamlMap {
  const entry = Array.isArray(list) ? list.find((e) => isMap(e) && e.name === name) : undefined;
  if (!entry) return fail(`no ${field} named "${name}"`);
  const value = (entry as YamlMap)[field];
  return isMap(value) ? value : value == null ? {} : fail(`${field} "${name}" is not a map`);
}

/** The API server's URL must be a plain http(s) URL; a refusal never prints its user info. */
function checkServer(url: string, what: string): void {
  const shown = JSON.stringify(withoutUserInfo(url));
  if (hasUserInfo(url)) throw new KubeConfigError(`${what}: ${shown} must not carry a user or password (give credentials in a kubeconfig)`);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new KubeConfigError(`${what}: ${shown} is not a URL`);
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') throw new KubeConfigError(`${what}: ${shown} must be an http or https URL`);
  if (parsed.search || parsed.hash || parsed.username || parsed.password) throw new KubeConfigError(`${what}: ${shown} must have no query, fragment or user`);
}

const trimSlash = (url: string) => url.replace(/\/+$/, '');

function readFile(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new KubeConfigError(`cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
