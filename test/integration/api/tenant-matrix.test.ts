/**
 * Tenant isolation on every endpoint that names a stored thing: with two
 * organizations, every operation of api/openapi.yaml that takes a media key,
 * a folder id or a job id answers 404 (never 403, never the data) when given
 * the other organization's, in the documented envelope, and does nothing: no
 * record, no object (merge inputs already uploaded are removed), no job. The
 * same request with the owner's token succeeds, so the 404 is about tenancy.
 *
 * The table is built from the spec's parameters and request bodies, so a new
 * operation or input that takes a key or id is in it as soon as it is
 * described (and fails until a request for it is written below).
 * (test/integration/api/tenants.test.ts covers same-name folders and
 * concurrent uploads across organizations.)
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import {
  normalizeRenderOptions,
  variantId,
  variantKey,
} from '../../../shared/media/render-options';
import { fixture, form } from '../../support/files';
import { deref, expectMatchesSpec, nodeAt, pointerOf, specOperations } from '../../support/openapi';

/** Inputs that name a stored thing, and the 404 code another tenant's value gets. */
const ID_INPUTS: Record<string, string> = {
  media: 'MEDIA_NOT_FOUND',
  mediaKey: 'MEDIA_NOT_FOUND',
  mediaKeys: 'MEDIA_NOT_FOUND',
  'mediaKeys[]': 'MEDIA_NOT_FOUND',
  folderId: 'FOLDER_NOT_FOUND',
  id: 'JOB_NOT_FOUND',
  /** A webhook message's id (the delivery log's filter). */
  messageId: 'NOT_FOUND',
};
/** `{id}` names a job, a record or a folder, by path. */
const codeFor = (row: Row): string =>
  row.path.startsWith('/media/webhooks/')
    ? 'NOT_FOUND'
    : row.path.startsWith('/media/upload/resumable/') ||
        row.path.startsWith('/media/upload/direct/')
      ? 'UPLOAD_NOT_FOUND'
      : row.input !== 'id'
        ? ID_INPUTS[row.input]!
        : row.path.startsWith('/media/folders/')
          ? 'FOLDER_NOT_FOUND'
          : row.path === '/media/{id}' || row.path.startsWith('/media/trash/')
            ? 'MEDIA_NOT_FOUND'
            : ID_INPUTS.id!;
/** Names that look like a key or an id: each must be in ID_INPUTS (or this test needs a look). */
const LOOKS_LIKE_ID = /(?:key|id)s?(?:\[\])?$/i;

type Json = Record<string, unknown>;
type Row = { method: string; path: string; input: string; where: 'query' | 'path' | 'body' };

/** Every (operation, input naming a stored thing) pair the spec describes. */
function specRows(): { rows: Row[]; unknown: string[] } {
  const rows: Row[] = [];
  const unknown: string[] = [];
  const add = (row: Row) => {
    if (row.input in ID_INPUTS) {
      if (!rows.some((r) => JSON.stringify(r) === JSON.stringify(row))) rows.push(row);
    } else if (LOOKS_LIKE_ID.test(row.input)) {
      unknown.push(`${row.method} ${row.path} ${row.input}`);
    }
  };
  for (const { method, path } of specOperations()) {
    const pointer = pointerOf(['paths', path, method.toLowerCase()]);
    const op = nodeAt(pointer) as Json;
    const params = Array.isArray(op.parameters) ? op.parameters : [];
    params.forEach((raw, i) => {
      const p = deref(raw, `${pointer}/parameters/${i}`).node as { name: string; in: string };
      if (p.in === 'query' || p.in === 'path') add({ method, path, input: p.name, where: p.in });
    });
    if (op.requestBody === undefined) continue;
    const body = deref(op.requestBody, `${pointer}/requestBody`).node;
    for (const [type, media] of Object.entries((body.content ?? {}) as Json)) {
      const schema = (media as Json).schema;
      if (schema === undefined) continue;
      const at = `${pointer}/requestBody/content/${pointerOf([type]).slice(1)}/schema`;
      const properties = (deref(schema, at).node.properties ?? {}) as Json;
      for (const input of Object.keys(properties)) add({ method, path, input, where: 'body' });
    }
  }
  return { rows, unknown };
}

let api: TestApi;
let alpha: TestOrg;
let beta: TestOrg;
/** alpha's things, which beta must not reach. */
const owned = {
  jpegKey: '',
  jpegId: 0,
  pdfKey: '',
  folderId: 0,
  jobId: '',
  /** Deleted by the controls of the delete rows (each its own). */
  doomedKey: '',
  doomedId: 0,
  doomedFolderId: 0,
  renamedFolderId: 0,
  /** Files in alpha's trash: one the restore row's control restores, one the purge row's purges. */
  trashedId: 0,
  purgedId: 0,
  /** A webhook endpoint (and one the delete row's control removes), and a message in its log. */
  webhookId: 0,
  doomedWebhookId: 0,
  messageId: 'msg_alpha_0123456789abcdef',
  /** Resumable uploads of alpha's: one for the HEAD row, one the PATCH row's control completes, one the DELETE row's control terminates. */
  tusHeadId: '',
  tusPatchId: '',
  tusDeleteId: '',
  /** A direct-to-storage upload of alpha's, its bytes sent: the completion row's control records it. */
  directId: '',
  /** Another, which the cancel row's control cancels. */
  directCancelId: '',
};

/** A direct-to-storage upload of `data` requested by `org`, its bytes PUT to the store; its id. */
async function directUpload(org: TestOrg, data: Buffer): Promise<string> {
  const res = await fetch(`${api.url}/media/upload/direct`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name: 'direct.pdf', size: data.length, type: 'application/pdf' }),
  });
  expect(res.status).toBe(201);
  const { data: ticket } = (await res.json()) as {
    data: { id: string; url: string; headers: Record<string, string> };
  };
  const put = await fetch(ticket.url, {
    method: 'PUT',
    headers: ticket.headers,
    body: new Uint8Array(data),
  });
  expect(put.status).toBe(200);
  return ticket.id;
}

/** A resumable (tus) upload of `length` bytes created by `org`; its id. */
async function tusUpload(org: TestOrg, length: number): Promise<string> {
  const res = await fetch(`${api.url}/media/upload/resumable`, {
    method: 'POST',
    headers: {
      ...org.auth,
      'Tus-Resumable': '1.0.0',
      'Upload-Length': String(length),
      'Upload-Metadata': `filename ${Buffer.from('resumable.pdf').toString('base64')}`,
    },
  });
  expect(res.status).toBe(201);
  return res.headers.get('location')!.split('/').pop()!;
}

beforeAll(async () => {
  api = await startApi('tenantmatrix', {
    env: {
      URL_SIGNING_KEYS: 'tenant-matrix-signing-key-0123456789abcdef',
      // Swift's s3api (the harness's store) takes presigned PUTs, not POST policies.
      DIRECT_UPLOAD_SINGLE: 'put',
      // No worker runs here: a direct upload's completion waits this long for its read-back
      // job (upload.complete-direct), then answers 504 with the job's id.
      JOB_WAIT_MS: '1000',
    },
  });
  alpha = await api.createOrg('alpha');
  beta = await api.createOrg('beta');
  const folder = async (name: string) => {
    const res = await fetch(`${api.url}/media/folders`, {
      method: 'POST',
      headers: { ...alpha.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: number } }).data.id;
  };
  const doomed = [
    await alpha.uploadRecord('Canon_40D.jpg', 'doomed-by-key.jpg'),
    await alpha.uploadRecord('Canon_40D.jpg', 'doomed-by-id.jpg'),
  ];
  const jpeg = await alpha.uploadRecord('Canon_40D.jpg', 'secret.jpg', { folder: 'private' });
  // Two files in alpha's trash (kept for an hour while they are deleted; this file's other
  // deletes are immediate, as the test environment's retention is 0).
  const trashed = [
    await alpha.uploadRecord('Canon_40D.jpg', 'trashed.jpg'),
    await alpha.uploadRecord('Canon_40D.jpg', 'purged.jpg'),
  ];
  await api.ctx.organizations.setTrashRetention(alpha.organization.id, 3600);
  for (const t of trashed) {
    const res = await fetch(`${api.url}/media/${t.id}`, { method: 'DELETE', headers: alpha.auth });
    expect(res.status).toBe(200);
  }
  await api.ctx.organizations.setTrashRetention(alpha.organization.id, null);
  owned.trashedId = trashed[0]!.id;
  owned.purgedId = trashed[1]!.id;
  const pdf = await alpha.uploadRecord('minimal-document.pdf', 'contract.pdf');
  // A stored variant of the JPEG (this file runs no worker): the render control streams it.
  const options = normalizeRenderOptions({
    width: 10,
    height: null,
    fit: 'cover',
    format: 'png',
    quality: null,
    keepMetadata: false,
  });
  const rendered = { id: variantId(options), key: variantKey(jpeg.key, options) };
  await api.ctx.store.put(rendered.key, fixture('Canon_40D.jpg'), { contentType: 'image/png' });
  await api.ctx.repositories.variants.add(
    alpha.organization.id,
    jpeg.key,
    {
      ...rendered,
      mimetype: 'image/png',
      bytes: fixture('Canon_40D.jpg').length,
      width: 10,
      height: 7,
    },
    api.env.config.render.maxVariants,
  );
  // Webhook endpoints on a public address literal (registration resolves nothing, sends nothing).
  const webhook = async () => {
    const res = await fetch(`${api.url}/media/webhooks`, {
      method: 'POST',
      headers: { ...alpha.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ url: 'https://93.184.215.14/hook', events: ['media.created'] }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: number } }).data.id;
  };
  owned.tusHeadId = await tusUpload(alpha, fixture('minimal-document.pdf').length);
  owned.tusPatchId = await tusUpload(alpha, fixture('minimal-document.pdf').length);
  owned.tusDeleteId = await tusUpload(alpha, fixture('minimal-document.pdf').length);
  owned.directId = await directUpload(alpha, fixture('minimal-document.pdf'));
  owned.directCancelId = await directUpload(alpha, fixture('minimal-document.pdf'));
  owned.webhookId = await webhook();
  owned.doomedWebhookId = await webhook();
  // A message in its log (this file runs no worker): what replay and the log's filter name.
  await api.ctx.models.WebhookDelivery.create({
    endpointId: owned.webhookId,
    organizationId: alpha.organization.id,
    messageId: owned.messageId,
    eventId: null,
    eventType: 'webhook.test',
    attempt: 1,
    trigger: 'test',
    at: new Date(),
    ok: false,
    status: 500,
    latencyMs: 3,
    errorClass: 'http_status',
    response: '',
    nextAttemptAt: null,
  });
  const job = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(jpeg.key)}`, {
    headers: { ...alpha.auth, Prefer: 'respond-async' },
  });
  expect(job.status).toBe(202);
  Object.assign(owned, {
    jpegKey: jpeg.key,
    jpegId: jpeg.id,
    doomedKey: doomed[0]!.key,
    doomedId: doomed[1]!.id,
    doomedFolderId: await folder('doomed'),
    renamedFolderId: await folder('to rename'),
    pdfKey: pdf.key,
    // Upload answers carry no folderId (the interface's form): the folder's id from MongoDB.
    folderId: (await api.ctx.models.Folder.findOne({
      organizationId: alpha.organization.id,
      name: 'private',
    }).lean())!.id,
    jobId: ((await job.json()) as { data: { jobId: string } }).data.jobId,
  });
});
afterAll(() => api.close());

type Answer = { status: number; headers: Headers | IncomingHttpHeaders; text: string };

async function viaFetch(path: string, init: RequestInit): Promise<Answer> {
  const res = await fetch(`${api.url}${path}`, init);
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** GET with a JSON body (fetch refuses one; the metadata endpoint reads it). */
function getWithBody(path: string, headers: Record<string, string>, body: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${api.url}${path}`, {
      method: 'GET',
      headers: {
        ...headers,
        'Content-Type': 'application/json',
        'Content-Length': Buffer.byteLength(body),
      },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text: Buffer.concat(chunks).toString('utf8'),
        }),
      );
    });
    req.end(body);
  });
}

const async = { Prefer: 'respond-async' }; // job endpoints: answer 202 at once (no worker here)
const pdf = () => fixture('minimal-document.pdf');

/** For each row: the request, made with the given organization's token. */
const REQUESTS: Record<string, (org: TestOrg) => Promise<Answer>> = {
  'GET /media/download media (query)': (org) =>
    viaFetch(`/media/download?media=${encodeURIComponent(owned.jpegKey)}`, { headers: org.auth }),
  'HEAD /media/download media (query)': (org) =>
    viaFetch(`/media/download?media=${encodeURIComponent(owned.jpegKey)}`, {
      method: 'HEAD',
      headers: org.auth,
    }),
  'GET /media/render media (query)': (org) =>
    viaFetch(`/media/render?media=${encodeURIComponent(owned.jpegKey)}&w=10&format=png`, {
      headers: org.auth,
    }),
  'GET /media/metadata mediaKey (query)': (org) =>
    viaFetch(`/media/metadata?mediaKey=${encodeURIComponent(owned.jpegKey)}`, {
      headers: { ...org.auth, ...async },
    }),
  'GET /media/metadata mediaKey (body)': (org) =>
    getWithBody(
      '/media/metadata',
      { ...org.auth, ...async },
      JSON.stringify({ mediaKey: owned.jpegKey }),
    ),
  'POST /media/convert mediaKey (body)': (org) =>
    viaFetch('/media/convert', {
      method: 'POST',
      headers: { ...org.auth, ...async, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: owned.jpegKey, format: 'webp' }),
    }),
  // An uploaded input first: it is streamed to storage before the key is refused, and must go.
  'POST /media/merge-pdfs mediaKeys (body)': (org) =>
    viaFetch('/media/merge-pdfs', {
      method: 'POST',
      headers: { ...org.auth, ...async },
      body: form([
        ['files', pdf(), 'mine.pdf'],
        ['mediaKeys', owned.pdfKey],
      ]),
    }),
  'POST /media/merge-pdfs mediaKeys[] (body)': (org) =>
    viaFetch('/media/merge-pdfs', {
      method: 'POST',
      headers: { ...org.auth, ...async },
      body: form([['mediaKeys[]', JSON.stringify([owned.pdfKey])]]),
    }),
  'POST /media/merge-pdfs folderId (body)': (org) =>
    viaFetch('/media/merge-pdfs', {
      method: 'POST',
      headers: { ...org.auth, ...async },
      body: form([
        ['files', pdf(), 'mine.pdf'],
        ['folderId', String(owned.folderId)],
      ]),
    }),
  // No worker runs here: the import is queued (202), never fetched.
  'POST /media/upload/url folderId (body)': (org) =>
    viaFetch('/media/upload/url', {
      method: 'POST',
      headers: { ...org.auth, ...async, 'Content-Type': 'application/json' },
      body: JSON.stringify({ url: 'http://93.184.215.14/x.jpg', folderId: owned.folderId }),
    }),
  'POST /media/upload folderId (body)': (org) =>
    viaFetch('/media/upload', {
      method: 'POST',
      headers: org.auth,
      body: form([
        ['folderId', String(owned.folderId)],
        ['file', fixture('Canon_40D.jpg'), 'x.jpg'],
      ]),
    }),
  'POST /media/upload/multiple folderId (body)': (org) =>
    viaFetch('/media/upload/multiple', {
      method: 'POST',
      headers: org.auth,
      // The folder comes after the files: they are already stored when it is refused.
      body: form([
        ['files', fixture('Canon_40D.jpg'), 'x.jpg'],
        ['files', pdf(), 'y.pdf'],
        ['folderId', String(owned.folderId)],
      ]),
    }),
  'POST /media/upload/base64 folderId (body)': (org) =>
    viaFetch('/media/upload/base64', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({
        file: `data:image/jpeg;base64,${fixture('Canon_40D.jpg').toString('base64')}`,
        folderId: owned.folderId,
      }),
    }),
  'POST /media/sign mediaKey (body)': (org) =>
    viaFetch('/media/sign', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: owned.jpegKey }),
    }),
  'POST /media/sign mediaKeys (body)': (org) =>
    viaFetch('/media/sign', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKeys: [owned.pdfKey, owned.jpegKey] }),
    }),
  'POST /media/archive mediaKeys (body)': (org) =>
    viaFetch('/media/archive', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKeys: [owned.pdfKey, owned.jpegKey] }),
    }),
  'POST /media/archive folderId (body)': (org) =>
    viaFetch('/media/archive', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ folderId: owned.folderId }),
    }),
  'GET /media/jobs/{id} id (path)': (org) =>
    viaFetch(`/media/jobs/${encodeURIComponent(owned.jobId)}`, { headers: org.auth }),
  'GET /media folderId (query)': (org) =>
    viaFetch(`/media?folderId=${owned.folderId}`, { headers: org.auth }),
  'GET /media/record media (query)': (org) =>
    viaFetch(`/media/record?media=${owned.jpegKey}`, { headers: org.auth }),
  'DELETE /media/record media (query)': (org) =>
    viaFetch(`/media/record?media=${owned.doomedKey}`, { method: 'DELETE', headers: org.auth }),
  // After the render row (the spec's order): the owner's control removes the stored variant.
  'DELETE /media/variants media (query)': (org) =>
    viaFetch(`/media/variants?media=${owned.jpegKey}`, { method: 'DELETE', headers: org.auth }),
  'GET /media/{id} id (path)': (org) => viaFetch(`/media/${owned.jpegId}`, { headers: org.auth }),
  'DELETE /media/{id} id (path)': (org) =>
    viaFetch(`/media/${owned.doomedId}`, { method: 'DELETE', headers: org.auth }),
  'HEAD /media/upload/resumable/{id} id (path)': (org) =>
    viaFetch(`/media/upload/resumable/${owned.tusHeadId}`, {
      method: 'HEAD',
      headers: { ...org.auth, 'Tus-Resumable': '1.0.0' },
    }),
  // The owner's control sends every byte: the upload completes into a record (200).
  'PATCH /media/upload/resumable/{id} id (path)': (org) =>
    viaFetch(`/media/upload/resumable/${owned.tusPatchId}`, {
      method: 'PATCH',
      headers: {
        ...org.auth,
        'Tus-Resumable': '1.0.0',
        'Upload-Offset': '0',
        'Content-Type': 'application/offset+octet-stream',
      },
      body: new Uint8Array(pdf()),
    }),
  'DELETE /media/upload/resumable/{id} id (path)': (org) =>
    viaFetch(`/media/upload/resumable/${owned.tusDeleteId}`, {
      method: 'DELETE',
      headers: { ...org.auth, 'Tus-Resumable': '1.0.0' },
    }),
  // The owner's control is booked (201), its upload left to expire.
  'POST /media/upload/direct folderId (body)': (org) =>
    viaFetch('/media/upload/direct', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({
        name: 'direct.pdf',
        size: 1000,
        type: 'application/pdf',
        folderId: owned.folderId,
      }),
    }),
  // The owner's control gets as far as its read-back job (queued; no worker here, so a 504
  // with the job's id once JOB_WAIT_MS is out): past the tenancy check, which beta's is not.
  'POST /media/upload/direct/{id}/complete id (path)': (org) =>
    viaFetch(`/media/upload/direct/${owned.directId}/complete`, {
      method: 'POST',
      headers: org.auth,
    }),
  // The owner's control cancels the upload (204).
  'DELETE /media/upload/direct/{id} id (path)': (org) =>
    viaFetch(`/media/upload/direct/${owned.directCancelId}`, {
      method: 'DELETE',
      headers: org.auth,
    }),
  'POST /media/trash/{id}/restore id (path)': (org) =>
    viaFetch(`/media/trash/${owned.trashedId}/restore`, { method: 'POST', headers: org.auth }),
  'DELETE /media/trash/{id} id (path)': (org) =>
    viaFetch(`/media/trash/${owned.purgedId}`, { method: 'DELETE', headers: org.auth }),
  'GET /media/folders/{id} id (path)': (org) =>
    viaFetch(`/media/folders/${owned.folderId}`, { headers: org.auth }),
  'PATCH /media/folders/{id} id (path)': (org) =>
    viaFetch(`/media/folders/${owned.renamedFolderId}`, {
      method: 'PATCH',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'renamed' }),
    }),
  'DELETE /media/folders/{id} id (path)': (org) =>
    viaFetch(`/media/folders/${owned.doomedFolderId}`, { method: 'DELETE', headers: org.auth }),
  // Alpha's control moves its JPEG into its folder, and the next row's control back to no folder.
  'POST /media/move folderId (body)': (org) =>
    viaFetch('/media/move', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKeys: [owned.jpegKey], folderId: owned.folderId }),
    }),
  'POST /media/move mediaKeys (body)': (org) =>
    viaFetch('/media/move', {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({
        mediaKeys: [owned.jpegKey],
        folderId: org.organization.rootFolderId,
      }),
    }),
  'GET /media/webhooks/{id} id (path)': (org) =>
    viaFetch(`/media/webhooks/${owned.webhookId}`, { headers: org.auth }),
  'PATCH /media/webhooks/{id} id (path)': (org) =>
    viaFetch(`/media/webhooks/${owned.webhookId}`, {
      method: 'PATCH',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ description: 'renamed' }),
    }),
  'DELETE /media/webhooks/{id} id (path)': (org) =>
    viaFetch(`/media/webhooks/${owned.doomedWebhookId}`, { method: 'DELETE', headers: org.auth }),
  'GET /media/webhooks/{id}/deliveries id (path)': (org) =>
    viaFetch(`/media/webhooks/${owned.webhookId}/deliveries`, { headers: org.auth }),
  'GET /media/webhooks/{id}/deliveries messageId (query)': (org) =>
    viaFetch(`/media/webhooks/${owned.webhookId}/deliveries?messageId=${owned.messageId}`, {
      headers: org.auth,
    }),
  'POST /media/webhooks/{id}/replay id (path)': (org) =>
    viaFetch(`/media/webhooks/${owned.webhookId}/replay`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ messageId: owned.messageId }),
    }),
  'POST /media/webhooks/{id}/rotate id (path)': (org) =>
    viaFetch(`/media/webhooks/${owned.webhookId}/rotate`, { method: 'POST', headers: org.auth }),
  'POST /media/webhooks/{id}/test id (path)': (org) =>
    viaFetch(`/media/webhooks/${owned.webhookId}/test`, { method: 'POST', headers: org.auth }),
};

const { rows, unknown } = specRows();
const nameOf = (r: Row) => `${r.method} ${r.path} ${r.input} (${r.where})`;

describe('the table', () => {
  it('covers every input of the spec that names a key or an id, with a request for each', () => {
    expect(unknown).toEqual([]);
    expect(rows.map(nameOf).filter((name) => !(name in REQUESTS))).toEqual([]);
    // The endpoints the issue names are all in it.
    const ops = new Set(rows.map((r) => `${r.method} ${r.path}`));
    for (const op of [
      'GET /media/download',
      'GET /media/metadata',
      'POST /media/convert',
      'POST /media/merge-pdfs',
      'GET /media/jobs/{id}',
      'POST /media/upload',
      'POST /media/upload/multiple',
      'POST /media/upload/base64',
      'GET /media',
      'GET /media/record',
      'DELETE /media/record',
      'GET /media/{id}',
      'DELETE /media/{id}',
      'GET /media/folders/{id}',
      'PATCH /media/folders/{id}',
      'DELETE /media/folders/{id}',
    ]) {
      expect([...ops]).toContain(op);
    }
  });
});

describe("another organization's key, folder id or job id is a 404", () => {
  const controls: Answer[] = [];

  it.each(rows.map((r): [string, Row] => [nameOf(r), r]))('%s', async (name, row) => {
    const make = REQUESTS[name];
    if (!make) throw new Error(`no request for ${name}`);
    const expectedCode = codeFor(row);

    const refused = await make(beta);
    expect(refused.status).toBe(404);
    expectMatchesSpec(row.method, row.path, 404, refused.text, refused.headers);
    if (row.method !== 'HEAD') {
      const body = JSON.parse(refused.text) as Json;
      expect(body).toMatchObject({ statusCode: 404, error: expectedCode });
      // Nothing of alpha's leaks into the answer, beyond the value beta sent.
      expect(refused.text).not.toContain('"organizationId"');
      expect(refused.text).not.toContain('secret.jpg');
    }

    // Control: the owner gets the thing (so the 404 is about tenancy, not a typo).
    const served = await make(alpha);
    if (row.path === '/media/upload/direct/{id}/complete') {
      expect([served.status, (JSON.parse(served.text) as Json).error]).toEqual([
        504,
        'JOB_TIMEOUT',
      ]);
      expectMatchesSpec(row.method, row.path, 504, served.text, served.headers);
    } else {
      // (A tus termination answers 204, its spec's success.)
      expect([200, 201, 202, 204]).toContain(served.status);
    }
    controls.push(served);
  });

  it('stored, recorded and queued nothing for the refused requests', async () => {
    expect(
      await api.ctx.models.Media.countDocuments({ organizationId: beta.organization.id }),
    ).toBe(0);
    expect(await api.objectKeys(`${beta.organization.slug}/`)).toEqual([]);
    expect(
      await api.ctx.models.Folder.countDocuments({ organizationId: beta.organization.id }),
    ).toBe(0);
    // Jobs: exactly alpha's (the one made in beforeAll and those of the controls); none for beta.
    // Webhook deliveries (the controls' replay and test send) are alpha's, and not a 202's job.
    const { webhook: deliveries, ...counts } = await api.ctx.queue.counts();
    const total = Object.values(counts)
      .flatMap((byState) => Object.values(byState))
      .reduce((a, b) => a + b, 0);
    const webhookJobs = await api.ctx.queue.queue('webhook').getJobs();
    expect(Object.values(deliveries).reduce((a, b) => a + b, 0)).toBe(webhookJobs.length);
    expect(webhookJobs.map((j) => (j.data as { organizationId: number }).organizationId)).toEqual(
      webhookJobs.map(() => alpha.organization.id),
    );
    expect(webhookJobs.length).toBe(2);
    expect(controls.length).toBe(rows.length);
    const alphaJobs = new Set([owned.jobId]);
    for (const c of controls.filter((c) => c.status === 202)) {
      alphaJobs.add((JSON.parse(c.text) as { data: { jobId: string } }).data.jobId);
    }
    for (const c of controls.filter((c) => c.status === 504)) {
      alphaJobs.add((JSON.parse(c.text) as { jobId: string }).jobId);
    }
    expect(alphaJobs.size).toBeGreaterThan(1);
    expect(total).toBe(alphaJobs.size);
  });
});
