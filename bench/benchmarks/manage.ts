/**
 * 8. Managing what is stored: the latency of a page of 50 of `GET /media`
 * from an organization holding 100,000 records (the first page, and pages
 * deep in the listing through the cursor), and of a `DELETE /media/{id}`
 * (mark, object, record, usage).
 */
import { createHash } from 'node:crypto';
import { request } from 'undici';
import type { Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import type { BenchmarkResult, Table } from '../lib/report';
import { percentile, stat } from '../lib/stats';

const PAGE = 50;

export const manage: Benchmark = {
  id: 'manage',
  title: 'Listing and deleting',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const records = ctx.quick ? 2_000 : 100_000;
    const pages = ctx.quick ? 30 : 300;
    const deletes = ctx.quick ? 5 : 50;
    const rounds = ctx.quick ? 1 : 3;
    const { Media } = stack.data.models;

    // Records straight into MongoDB (listing reads no object), in id order, as uploads make them.
    ctx.log(`manage: writing ${records} records`);
    const base = 10_000_000;
    const at = Date.now() - records * 1000;
    for (let i = 0; i < records; i += 5_000) {
      const batch = [];
      for (let j = i; j < Math.min(records, i + 5_000); j++) {
        batch.push({
          id: base + j,
          organizationId: stack.organizationId,
          folderId: null,
          key: `${stack.organizationSlug}/listed-${j}-AAAAAAAAAAAA.jpg`,
          name: `listed-${j}.jpg`,
          mimetype: j % 10 === 0 ? 'application/pdf' : 'image/jpeg',
          bytes: 1000 + j,
          checksum: `sha256:${createHash('sha256').update(String(j)).digest('hex')}`,
          metaData: { ipAddress: '::ffff:127.0.0.1', userAgent: 'bench' },
          createdBy: null,
          deletingAt: null,
          createdAt: new Date(at + j * 1000),
          updatedAt: new Date(at + j * 1000),
        });
      }
      await Media.insertMany(batch, { ordered: false, lean: true });
    }

    const get = async (path: string) => {
      const t = performance.now();
      const res = await request(`${stack.url}${path}`, { headers: stack.auth });
      const body = (await res.body.json()) as {
        data: { media: unknown[]; nextCursor: string | null };
      };
      if (res.statusCode !== 200) throw new Error(`${path} answered ${res.statusCode}`);
      return { ms: performance.now() - t, body: body.data };
    };

    const first: { p50: number[]; p99: number[] } = { p50: [], p99: [] };
    const deep: { p50: number[]; p99: number[] } = { p50: [], p99: [] };
    const filtered: { p50: number[]; p99: number[] } = { p50: [], p99: [] };
    for (let r = 0; r < rounds; r++) {
      ctx.log(`manage: listing, round ${r + 1}/${rounds}`);
      const firsts: number[] = [];
      const walks: number[] = [];
      const types: number[] = [];
      for (let i = 0; i < pages; i++) firsts.push((await get(`/media?limit=${PAGE}`)).ms);
      let cursor: string | null = null;
      for (let i = 0; i < pages; i++) {
        const page = await get(`/media?limit=${PAGE}${cursor ? `&cursor=${cursor}` : ''}`);
        walks.push(page.ms);
        cursor = page.body.nextCursor;
      }
      for (let i = 0; i < pages; i++) types.push((await get(`/media?limit=${PAGE}&type=pdf`)).ms);
      for (const [into, samples] of [
        [first, firsts],
        [deep, walks],
        [filtered, types],
      ] as const) {
        into.p50.push(percentile(samples, 50));
        into.p99.push(percentile(samples, 99));
      }
    }

    ctx.log(`manage: ${deletes} deletes`);
    const deleteMs: number[] = [];
    for (let i = 0; i < deletes; i++) {
      const id = base + records - 1 - i;
      const t = performance.now();
      const res = await request(`${stack.url}/media/${id}`, {
        method: 'DELETE',
        headers: stack.auth,
      });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`DELETE /media/${id} answered ${res.statusCode}`);
      deleteMs.push(performance.now() - t);
    }
    await Media.deleteMany({ organizationId: stack.organizationId });
    await stack.clear();

    const table: Table = {
      columns: [
        { key: 'what', label: 'request' },
        { key: 'p50', label: 'p50, ms', digits: 1 },
        { key: 'p99', label: 'p99, ms', digits: 1 },
      ],
      rows: [
        {
          what: `GET /media?limit=${PAGE} (first page)`,
          p50: stat(first.p50),
          p99: stat(first.p99),
        },
        {
          what: `GET /media?limit=${PAGE}&cursor=… (pages 1-${pages})`,
          p50: stat(deep.p50),
          p99: stat(deep.p99),
        },
        {
          what: `GET /media?limit=${PAGE}&type=pdf`,
          p50: stat(filtered.p50),
          p99: stat(filtered.p99),
        },
        {
          what: 'DELETE /media/{id}',
          p50: stat([percentile(deleteMs, 50)]),
          p99: stat([percentile(deleteMs, 99)]),
        },
      ],
    };
    const labels = ['first page', 'deep pages', 'type=pdf', 'delete'];
    const chart = table.rows.flatMap((row, i) =>
      (['p50', 'p99'] as const).map((series) => ({
        group: labels[i]!,
        series,
        ...(row[series] as ReturnType<typeof stat>),
      })),
    );
    return {
      id: this.id,
      title: this.title,
      method: `
An organization holding ${records.toLocaleString('en-US')} records (written
straight into MongoDB, ids in order, one in ten a PDF). One client, one
request at a time: ${pages} requests for the first page of ${PAGE}, a walk
of ${pages} pages through \`nextCursor\` (${(pages * PAGE).toLocaleString('en-US')}
records deep), and ${pages} first pages filtered by \`type=pdf\`; ${rounds}
round(s), the table gives the median and min–max of each round's
percentile. Then ${deletes} \`DELETE /media/{id}\` of records whose object is
absent (the delete's MongoDB and storage round trips all the same). The
MongoDB backend is the harness's (see the page's services line): on the
stand-in, queries scan the collection (it keeps no index structures), so
these figures are an upper bound for a real \`mongod\`, which serves every
filter from an index that starts with the organization.`,
      tables: [table],
      charts: [
        {
          id: 'manage',
          title: 'Listing and deleting latency',
          spec: bars({
            title: `GET /media (page of ${PAGE}) and DELETE latency`,
            data: chart,
            yTitle: 'ms',
          }),
        },
      ],
      targets: [],
    };
  },
};
