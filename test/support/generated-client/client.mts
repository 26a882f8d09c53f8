// A client as a client team would write it: types generated from
// api/openapi.yaml by openapi-typescript (openapi.d.ts, made by generate.mjs),
// calls through openapi-fetch, compiled under `tsc --strict`. It calls each
// operation of the interface once against API_URL with TOKEN and prints what
// it read as JSON. Run by test/integration/api/generated-client.test.ts.
import { readFileSync } from 'node:fs';
import createClient from 'openapi-fetch';
import type { paths } from './openapi';

const client = createClient<paths>({
  baseUrl: process.env.API_URL!,
  headers: { Authorization: `Bearer ${process.env.TOKEN!}` },
});
const jpeg = new Blob([readFileSync(process.env.JPEG!)], { type: 'image/jpeg' });

/** Multipart bodies, the way openapi-fetch asks for them. */
function formOf(body: Record<string, Blob | Blob[] | string | string[] | undefined>): FormData {
  const fd = new FormData();
  for (const [name, value] of Object.entries(body)) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v instanceof Blob) fd.append(name, v, `${name}.jpg`);
      else if (v !== undefined) fd.append(name, v);
    }
  }
  return fd;
}

const upload = await client.POST('/media/upload', {
  body: { file: jpeg, folder: 'Generated' },
  bodySerializer: formOf,
});
if (!upload.data) throw new Error(`upload: ${upload.response.status}`);
const record = upload.data.data;
// @ts-expect-error the interface shows no folderId in an upload's answer
const noFolderId: unknown = record.folderId;

const multiple = await client.POST('/media/upload/multiple', {
  body: { files: [jpeg, jpeg] },
  bodySerializer: formOf,
});
if (!multiple.data) throw new Error(`upload/multiple: ${multiple.response.status}`);
const keys: string[] = multiple.data.data.media.map((m) => m.key);

const base64 = await client.POST('/media/upload/base64', {
  body: {
    file: `data:image/jpeg;base64,${Buffer.from(await jpeg.arrayBuffer()).toString('base64')}`,
  },
});
if (!base64.data) throw new Error(`upload/base64: ${base64.response.status}`);
// An integer, never null (a file in no folder answers its root folder id).
const folderId: number = base64.data.data.folderId;

const metadata = await client.GET('/media/metadata', {
  params: { query: { mediaKey: record.key } },
});
if (!metadata.data) throw new Error(`metadata: ${metadata.response.status}`);
// A job answers 202 only when asked (Prefer: respond-async); the body's statusCode tells them apart.
if (metadata.data.statusCode !== 200) throw new Error('metadata: not finished');
const format: string = metadata.data.data.format;
const width: number = metadata.data.data.width;

const convert = await client.POST('/media/convert', {
  body: { mediaKey: record.key, format: 'png' },
});
if (!convert.data) throw new Error(`convert: ${convert.response.status}`);
if (convert.data.statusCode !== 200) throw new Error('convert: not finished');
const converted = convert.data.data;

const download = await client.GET('/media/download', {
  params: { query: { media: converted.key } },
  parseAs: 'arrayBuffer',
});
if (!download.data) throw new Error(`download: ${download.response.status}`);

const missing = await client.GET('/media/download', {
  params: { query: { media: 'nope/none.jpg' } },
});

process.stdout.write(
  JSON.stringify({
    upload: {
      status: upload.response.status,
      key: record.key,
      bucket: record.bucket,
      metaData: record.metaData,
      noFolderId: noFolderId === undefined,
    },
    multiple: { status: multiple.response.status, keys },
    base64: { status: base64.response.status, folderId },
    metadata: { format, width },
    convert: { mimetype: converted.mimetype, name: converted.name, folderId: converted.folderId },
    download: {
      bytes: download.data.byteLength,
      type: download.response.headers.get('content-type'),
    },
    missing: { status: missing.response.status, error: missing.error?.error },
  }),
);
