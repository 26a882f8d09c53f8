/**
 * The web console (docs/console.md): sign in with a pasted token, then the
 * files, trash, usage, webhooks and jobs views. A view's mutating controls show only
 * when the token may use them; the API refuses the rest anyway.
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import {
  api,
  currentToken,
  probeAbilities,
  problem,
  setToken,
  type Abilities,
  type Usage,
  type WebhookDelivery,
  type WebhookEndpoint,
} from './api';
import { FilesView } from './files';
import { TrashView } from './trash';
import { formatBytes, formatDate, Status, useJobs } from './ui';

type Tab = 'files' | 'trash' | 'usage' | 'webhooks' | 'jobs';

function SignIn(props: { onSignedIn: (can: Abilities) => void; message?: string }) {
  const [value, setValue] = useState('');
  const [remember, setRemember] = useState(true);
  const [status, setStatus] = useState(props.message ?? '');
  const submit = async (e: Event) => {
    e.preventDefault();
    setToken(value.trim(), remember);
    const can = await probeAbilities();
    if (can === 'unauthorized') {
      setToken(null, false);
      setStatus('The API refused this token (unknown, revoked or expired).');
    } else props.onSignedIn(can);
  };
  return (
    <main class="signin">
      <h1>Media console</h1>
      <form onSubmit={(e) => void submit(e)}>
        <label for="token">API token</label>
        <input
          id="token"
          type="password"
          autoComplete="off"
          required
          value={value}
          onInput={(e) => setValue(e.currentTarget.value)}
        />
        <label class="check">
          <input
            type="checkbox"
            checked={remember}
            onChange={(e) => setRemember(e.currentTarget.checked)}
          />
          Keep it for this tab (sessionStorage; cleared when the tab closes)
        </label>
        <button type="submit">Sign in</button>
      </form>
      <Status text={status} error />
    </main>
  );
}

function UsageView() {
  const [usage, setUsage] = useState<Usage | null>(null);
  const [error, setError] = useState('');
  useEffect(() => {
    void api.GET('/media/usage').then(({ data, error: e, response }) => {
      if (data) setUsage(data.data);
      else setError(problem(e, response));
    });
  }, []);
  if (!usage) return <Status text={error} error={!!error} />;
  const quota = (usage as { quota: { bytes?: number | null } | null }).quota;
  const limit = quota?.bytes ?? null;
  const used = usage.bytes + usage.variantBytes + usage.resultBytes;
  return (
    <section aria-labelledby="usage-title">
      <h2 id="usage-title">Usage</h2>
      <p>
        {usage.files} files, {formatBytes(used)} used
        {limit ? ` of ${formatBytes(limit)}` : ' (no quota)'}
      </p>
      {limit ? (
        <meter aria-label="Used of quota" min={0} max={limit} value={used} high={limit * 0.9}>
          {Math.round((used / limit) * 100)}%
        </meter>
      ) : null}
      <table>
        <caption>By type</caption>
        <thead>
          <tr>
            <th scope="col">Type</th>
            <th scope="col">Files</th>
            <th scope="col">Bytes</th>
          </tr>
        </thead>
        <tbody>
          {Object.entries(usage.byType).map(([type, t]) => (
            <tr key={type}>
              <td>{type}</td>
              <td>{t.files}</td>
              <td>{formatBytes(t.bytes)}</td>
            </tr>
          ))}
          <tr>
            <td>Rendered variants</td>
            <td>{usage.variants}</td>
            <td>{formatBytes(usage.variantBytes)}</td>
          </tr>
          <tr>
            <td>Job results</td>
            <td />
            <td>{formatBytes(usage.resultBytes)}</td>
          </tr>
        </tbody>
      </table>
    </section>
  );
}

function WebhooksView() {
  const [endpoints, setEndpoints] = useState<WebhookEndpoint[]>([]);
  const [open, setOpen] = useState<number | null>(null);
  const [deliveries, setDeliveries] = useState<WebhookDelivery[]>([]);
  const [status, setStatus] = useState({ text: '', error: false });
  useEffect(() => {
    void api.GET('/media/webhooks').then(({ data, error, response }) => {
      if (data) setEndpoints(data.data.webhooks);
      else setStatus({ text: problem(error, response), error: true });
    });
  }, []);
  const show = async (id: number) => {
    setOpen(id);
    const { data, error, response } = await api.GET('/media/webhooks/{id}/deliveries', {
      params: { path: { id: String(id) } },
    });
    if (data) setDeliveries(data.data.deliveries ?? []);
    else setStatus({ text: problem(error, response), error: true });
  };
  const replay = async (id: number, messageId: string) => {
    const { error, response } = await api.POST('/media/webhooks/{id}/replay', {
      params: { path: { id: String(id) } },
      body: { messageId },
    });
    setStatus(
      error
        ? { text: problem(error, response), error: true }
        : { text: `Message ${messageId} queued again`, error: false },
    );
    if (!error) await show(id);
  };
  return (
    <section aria-labelledby="webhooks-title">
      <h2 id="webhooks-title">Webhook endpoints</h2>
      <Status {...status} />
      {endpoints.length === 0 && <p>No endpoints.</p>}
      <ul>
        {endpoints.map((e) => (
          <li key={e.id}>
            <span>{e.url}</span> <span>({e.enabled ? 'enabled' : 'disabled'})</span>{' '}
            <span>{e.events.join(', ')}</span>{' '}
            <button type="button" onClick={() => void show(e.id)}>
              Delivery log
            </button>
          </li>
        ))}
      </ul>
      {open !== null && (
        <table>
          <caption>Deliveries of endpoint {open}</caption>
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">Event</th>
              <th scope="col">Attempt</th>
              <th scope="col">Result</th>
              <th scope="col">Replay</th>
            </tr>
          </thead>
          <tbody>
            {deliveries.map((d) => (
              <tr key={`${d.messageId}-${d.attempt}-${d.at}`}>
                <td>{formatDate(d.at)}</td>
                <td>{d.eventType}</td>
                <td>{d.attempt}</td>
                <td>{d.ok ? `ok ${d.status}` : `failed ${d.status ?? d.errorClass ?? ''}`}</td>
                <td>
                  <button type="button" onClick={() => void replay(open, d.messageId)}>
                    Replay {d.messageId}
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function JobsView() {
  const jobs = useJobs();
  const [id, setId] = useState('');
  const [found, setFound] = useState('');
  const lookUp = async (e: Event) => {
    e.preventDefault();
    const { data, error, response } = await api.GET('/media/jobs/{id}', {
      params: { path: { id } },
    });
    setFound(
      data
        ? `${response.status === 200 ? 'completed' : 'not finished'}`
        : `${problem(error, response)}`,
    );
  };
  return (
    <section aria-labelledby="jobs-title">
      <h2 id="jobs-title">Jobs</h2>
      <table>
        <caption>Started from this tab</caption>
        <thead>
          <tr>
            <th scope="col">Job</th>
            <th scope="col">What</th>
            <th scope="col">State</th>
          </tr>
        </thead>
        <tbody>
          {jobs.map((j) => (
            <tr key={j.jobId}>
              <td>{j.jobId}</td>
              <td>{j.what}</td>
              <td>{j.detail ? `${j.state}: ${j.detail}` : j.state}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <form onSubmit={(e) => void lookUp(e)}>
        <label for="job-id">Job id</label>
        <input id="job-id" value={id} required onInput={(e) => setId(e.currentTarget.value)} />
        <button type="submit">Look up</button>
      </form>
      <Status text={found} />
    </section>
  );
}

function App() {
  const [can, setCan] = useState<Abilities | null>(null);
  const [checking, setChecking] = useState(currentToken() !== null);
  const [tab, setTab] = useState<Tab>('files');
  useEffect(() => {
    if (!checking) return;
    void probeAbilities().then((r) => {
      if (r !== 'unauthorized') setCan(r);
      else setToken(null, false);
      setChecking(false);
    });
  }, [checking]);
  if (checking) return <p role="status">Checking the token…</p>;
  if (!can) return <SignIn onSignedIn={setCan} />;
  const tabs: [Tab, string][] = [
    ['files', 'Files'],
    ['trash', 'Trash'],
    ['usage', 'Usage'],
    ...(can.webhooks ? [['webhooks', 'Webhooks'] as [Tab, string]] : []),
    ['jobs', 'Jobs'],
  ];
  return (
    <>
      <header class="top">
        <h1>Media console</h1>
        <nav aria-label="Views">
          {tabs.map(([t, label]) => (
            <button key={t} type="button" aria-current={tab === t} onClick={() => setTab(t)}>
              {label}
            </button>
          ))}
        </nav>
        <span class="access">{can.write || can.delete ? 'read and write' : 'read-only'}</span>
        <button
          type="button"
          onClick={() => {
            setToken(null, false);
            setCan(null);
          }}
        >
          Sign out
        </button>
      </header>
      <main>
        {tab === 'files' && <FilesView can={can} />}
        {tab === 'trash' && <TrashView can={can} />}
        {tab === 'usage' && <UsageView />}
        {tab === 'webhooks' && <WebhooksView />}
        {tab === 'jobs' && <JobsView />}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
