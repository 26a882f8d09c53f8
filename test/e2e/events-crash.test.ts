/**
 * Domain events survive killed processes, end to end with the real API and
 * worker processes: uploads answered by an API that is then killed with
 * SIGKILL (before or while it records their events off the answer's path),
 * and a worker killed while it dispatches, leave every event recorded once
 * and dispatched once a worker runs again, by the dispatcher's own schedule
 * (nothing else asks it to).
 */
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { eventually } from '../support/eventually';
import { fixture } from '../support/files';
import { startApiProcess, startWorkerProcess, type ServiceProcess } from '../support/processes';

let harness: TestApi; // in-process, only to set up the organization and look behind the API
let org: TestOrg;
const started: ServiceProcess[] = [];

beforeAll(async () => {
  harness = await startApi('e2eevents', { env: { RATE_LIMIT_MAX: '0' } });
  org = await harness.createOrg('events');
}, 60_000);
afterAll(async () => {
  for (const p of started) await p.kill('SIGTERM').catch(() => undefined);
  await harness.close();
}, 60_000);

it('uploads whose API and worker were killed: every event recorded once and dispatched after a restart', async () => {
  const env = { ...harness.env.env, RATE_LIMIT_MAX: '0', MAX_UPLOADS_IN_FLIGHT: '100' };
  // Side by side; each is kept as it comes up, so that afterAll stops it whatever the other did.
  const kept = (p: ServiceProcess) => {
    started.push(p);
    return p;
  };
  const [api, worker] = await Promise.all([
    startApiProcess(env).then(kept),
    startWorkerProcess(env).then(kept),
  ]);

  const file = fixture('xmp-BlueSquare.jpg');
  const ids: number[] = [];
  const upload = async () => {
    ids.push((await org.uploadRecord(file, 'blue.jpg', { via: api.url! })).id);
  };
  // Uploads at once; the worker dies while it dispatches, the API right after its answers.
  await Promise.all(Array.from({ length: 20 }, upload));
  await worker.kill('SIGKILL');
  await Promise.all(Array.from({ length: 20 }, upload));
  await api.kill('SIGKILL');
  expect(ids).toHaveLength(40);

  // A worker again: its dispatcher records what the documents still hold and dispatches.
  started.push(await startWorkerProcess(env));
  const expected = ids.map((id) => `media.created:${id}`).sort();
  await eventually(async () => {
    const events = await harness.ctx.models.Event.find({ organizationId: org.organization.id })
      .lean()
      .exec();
    expect(events.map((e) => e._id).sort()).toEqual(expected);
    expect(events.filter((e) => e.dispatchedAt === null)).toEqual([]);
    // A batch the killed worker had claimed waits for its claim to lapse (30 s from the claim,
    // worker/events/dispatcher.ts): the bound is that and as long again.
  }, 60_000);
  // None left pending in a record.
  expect(
    await harness.ctx.models.Media.countDocuments({
      organizationId: org.organization.id,
      'pendingEvents.0': { $exists: true },
    }),
  ).toBe(0);
}, 120_000);
