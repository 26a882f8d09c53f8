/**
 * Summarises V8 CPU profiles (`node --cpu-prof`, as `npm run bench:load --
 * --cpu-prof <dir>` writes them): for each profile, the share of sampled time
 * by where the code lives (this repository's files, each npm package, Node's
 * own modules, native work, idle, garbage collection) and the functions with
 * the most self time.
 *
 *   npx tsx bench/cpu-profile-summary.ts <dir or .cpuprofile files> [--top 15]
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { parseArgs } from 'node:util';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const root = join(__dirname, '..');
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: 'string', default: '15' } },
});

/** Where a frame's code lives: a repository file, an npm package, node, or V8's own categories. */
function placeOf(node: Node): string {
  const { url, functionName } = node.callFrame;
  if (!url) {
    if (functionName === '(idle)') return '(idle)';
    if (functionName === '(garbage collector)') return '(garbage collector)';
    if (functionName === '(program)') return '(program: V8 and native code)';
    return functionName ? `(native: ${functionName})` : '(native)';
  }
  // node:internal/crypto/hash → node:internal/crypto (a module family, not one file).
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/').slice(0, 2).join('/')}`;
  const path = url.replace(/^file:\/\//, '');
  const nm = path.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = path.slice(nm + '/node_modules/'.length).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  return relative(root, path).replace(/^dist\//, '');
}

function summarise(file: string, top: number): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) =>
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)),
  );
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const places = new Map<string, number>();
  const functions = new Map<string, number>();
  for (const [id, us] of self) {
    const node = byId.get(id)!;
    const place = placeOf(node);
    places.set(place, (places.get(place) ?? 0) + us);
    const name = `${node.callFrame.functionName || '(anonymous)'} ${place}:${node.callFrame.lineNumber + 1}`;
    functions.set(name, (functions.get(name) ?? 0) + us);
  }
  const idle = places.get('(idle)') ?? 0;
  const busy = total - idle;
  const pct = (us: number) => `${((100 * us) / busy).toFixed(1)}%`;
  const rows = (m: Map<string, number>) =>
    [...m]
      .filter(([k]) => k !== '(idle)' && !k.startsWith('(idle)'))
      .sort(([, a], [, b]) => b - a)
      .slice(0, top)
      .map(([k, us]) => `| ${k} | ${(us / 1000).toFixed(0)} | ${pct(us)} |`)
      .join('\n');
  return [
    `### ${basename(file)}: ${(busy / 1e6).toFixed(1)} s busy of ${(total / 1e6).toFixed(1)} s sampled`,
    '',
    '| where | self ms | share of busy time |',
    '| --- | --- | --- |',
    rows(places),
    '',
    '| function | self ms | share of busy time |',
    '| --- | --- | --- |',
    rows(functions),
    '',
  ].join('\n');
}

const files = positionals.flatMap((p) =>
  statSync(p).isDirectory()
    ? readdirSync(p)
        .filter((f) => f.endsWith('.cpuprofile'))
        .sort()
        .map((f) => join(p, f))
    : [p],
);
if (files.length === 0) throw new Error('no .cpuprofile given (a file or a directory of them)');
for (const file of files) process.stdout.write(`${summarise(file, Number(values.top))}\n`);
