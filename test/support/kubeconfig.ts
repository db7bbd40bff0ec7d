// kubeconfig files for tests, in the YAML layout kubectl writes (one cluster,
// one user, one context, current-context set). Values are JSON-quoted, which
// is valid YAML for every string.

export interface KubeconfigSpec {
  server: string;
  /** A CA file path, or the PEM itself (written base64 as certificate-authority-data). */
  caFile?: string;
  caPem?: string;
  insecureSkipTlsVerify?: boolean;
  token?: string;
  tokenFile?: string;
  clientCertFile?: string;
  clientKeyFile?: string;
  clientCertPem?: string;
  clientKeyPem?: string;
}

const q = (s: string) => JSON.stringify(s);
const b64 = (s: string) => q(Buffer.from(s).toString('base64'));

export function kubeconfigYaml(spec: KubeconfigSpec): string {
  const cluster = [
    `    server: ${q(spec.server)}`,
    spec.caFile && `    certificate-authority: ${q(spec.caFile)}`,
    spec.caPem && `    certificate-authority-data: ${b64(spec.caPem)}`,
    spec.insecureSkipTlsVerify && '    insecure-skip-tls-verify: true',
  ];
  const user = [
    spec.token && `    token: ${q(spec.token)}`,
    spec.tokenFile && `    tokenFile: ${q(spec.tokenFile)}`,
    spec.clientCertFile && `    client-certificate: ${q(spec.clientCertFile)}`,
    spec.clientKeyFile && `    client-key: ${q(spec.clientKeyFile)}`,
    spec.clientCertPem && `    client-certificate-data: ${b64(spec.clientCertPem)}`,
    spec.clientKeyPem && `    client-key-data: ${b64(spec.clientKeyPem)}`,
  ];
  const lines = (l: (string | false | undefined)[]) => l.filter(Boolean).join('\n');
  return `apiVersion: v1
kind: Config
clusters:
- name: stand-in
  cluster:
${lines(cluster)}
users:
- name: tester
  user:
${lines(user) || '    {}'}
contexts:
- name: test
  context:
    cluster: stand-in
    user: tester
current-context: test
preferences: {}
`;
}
