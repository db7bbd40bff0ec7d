// CNI_TS_TRACE=1: milliseconds since process start at each step of a call,
// printed to stderr at exit. For finding where a slow call spends its time.

const marks: string[] | undefined = process.env.CNI_TS_TRACE ? [] : undefined;
if (marks) process.once('exit', () => process.stderr.write(`bridge trace: ${marks.join(', ')}\n`));

export function mark(label: string): void {
  marks?.push(`${label} ${(process.uptime() * 1000).toFixed(1)}`);
}
