// The dashboard in a real browser: Debian's headless Chromium driven by playwright-core.
// tests/it/dashboard.rs starts `awl serve` with auth on and runs this with
//   AWL_URL, AWL_TOKEN (an operator's), AWL_CHROMIUM, AWL_SCREENSHOTS (a directory).
// It signs in through the token prompt, watches the board and a run's timeline change
// without a reload, approves the run's gate by clicking, and sees the run finish;
// reruns it from its last step, and pauses, resumes and cancels another run with the
// buttons on its timeline; pauses and resumes the whole workflow from the Workflows tab.
// With AWL_AGENT_TOKEN (an agent of the operator's team), the agent repeats two tool
// sequences; the server's learner proposes both, and the Learned tab approves one and
// rejects the other with clicks.
// Any failed check exits non-zero with a message.
import { chromium } from "playwright-core";

const url = process.env.AWL_URL;
const token = process.env.AWL_TOKEN;
const agentToken = process.env.AWL_AGENT_TOKEN;
const shots = process.env.AWL_SCREENSHOTS;
// Every wait's limit, scaled: the suite runs beside other tests on two cores, where a
// live update can take several times as long as on an idle machine. A limit is only
// reached when a check fails, so a generous one costs nothing when all is well.
const SLACK = Number(process.env.AWL_BROWSER_SLACK) || 3;
const wait = (ms) => ms * SLACK;
const fail = (message) => { console.error("dashboard test failed: " + message); process.exit(1); };
if (!url || !token || !agentToken || !shots || !process.env.AWL_CHROMIUM) {
  fail("set AWL_URL, AWL_TOKEN, AWL_AGENT_TOKEN, AWL_SCREENSHOTS and AWL_CHROMIUM");
}

async function api(method, path, body, as) {
  const response = await fetch(url + path, {
    method,
    headers: { "authorization": "Bearer " + (as || token), "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await response.json();
  if (!response.ok) fail(`${method} ${path} answered ${response.status}: ${JSON.stringify(json)}`);
  return json;
}

async function step(what, action) {
  try {
    return await action();
  } catch (e) {
    await page.screenshot({ path: `${shots}/failed.png`, fullPage: true }).catch(() => {});
    fail(`${what}: ${e.message}`);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.AWL_CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
const errors = [];
page.on("pageerror", (e) => errors.push(e.message));

await step("open the dashboard", () => page.goto(url, { waitUntil: "domcontentloaded" }));
await step("the token prompt appears", () => page.waitForSelector("#token-dialog[open]", { timeout: wait(10000) }));
await page.fill("#token-input", "awl_not_a_token");
await page.click("#token-form button[type=submit]");
await step("a wrong token is refused", () => page.waitForSelector("#token-error:not([hidden])", { timeout: wait(10000) }));
await page.fill("#token-input", token);
await page.click("#token-form button[type=submit]");
await step("the right token signs in", () => page.waitForSelector("#token-dialog", { state: "hidden", timeout: wait(10000) }));
const stored = await page.evaluate(() => localStorage.getItem("awl.token"));
if (stored !== token) fail("the token was not kept in the browser");
await step("the board shows its columns", () => page.waitForSelector(".column[data-status=QUEUED]", { timeout: wait(10000) }));
await step("the live stream connects", () => page.waitForSelector("#live.on", { timeout: wait(10000) }));
// A marker that a reload would wipe out.
await page.evaluate(() => { window.__noReload = true; });

// The board changes without a reload.
await api("POST", "/api/v1/tasks", { prompt: "Review the release notes", capabilities: ["docs"] });
await step("a sent task appears on the board", () =>
  page.waitForSelector(".column[data-status=QUEUED] .card:has-text('Review the release notes')", { timeout: wait(10000) }));
await page.screenshot({ path: `${shots}/board.png`, fullPage: true });

// A run that waits at a gate: its timeline.
const run = await api("POST", "/api/v1/runs", { workflow: "browser-release", inputs: { version: "2.4.0" } });
await page.click("#tabs button[data-tab=runs]");
const row = `tr[data-run="${run.run_id}"]`;
await step("the run waits at its gate in the runs list", () => page.waitForSelector(`${row} .s-WAITING`, { timeout: wait(20000) }));
await page.click(row);
await step("the timeline chart draws the steps", () => page.waitForSelector("#timeline-chart rect.bar", { timeout: wait(10000) }));
const before = await page.locator("#timeline-rows tr").count();
await page.screenshot({ path: `${shots}/timeline-waiting.png`, fullPage: true });

// The inbox: approve by clicking.
await page.click("#tabs button[data-tab=inbox]");
await step("the gate is in the inbox", () => page.waitForSelector(".gate:has-text('Release 2.4.0?') button.approve", { timeout: wait(10000) }));
await page.screenshot({ path: `${shots}/inbox.png`, fullPage: true });
await page.click(".gate:has-text('Release 2.4.0?') button.approve");
await step("the approved gate leaves the inbox", () => page.waitForSelector(".gate", { state: "detached", timeout: wait(10000) }));

// The run finishes, and its timeline grows, without a reload.
await page.click("#tabs button[data-tab=runs]");
await step("the run succeeds", () => page.waitForSelector(`${row} .s-SUCCEEDED`, { timeout: wait(20000) }));
await step("the timeline shows the steps after the gate", async () => {
  await page.waitForFunction((n) => document.querySelectorAll("#timeline-rows tr").length > n, before, { timeout: wait(10000) });
  await page.waitForSelector("#timeline-gates .s-APPROVED", { timeout: wait(10000) });
});
await page.screenshot({ path: `${shots}/run-finished.png`, fullPage: true });

// Rerun from the step after the gate: a new run that does not ask again opens.
await page.click(`#timeline-rows tr[data-step="ship"] button.rerun`);
await step("the rerun opens and succeeds without asking", async () => {
  await page.waitForFunction((old) => {
    const code = document.querySelector("#timeline-title code");
    return code && code.textContent !== old;
  }, run.run_id, { timeout: wait(10000) });
  await page.waitForSelector("#timeline-title .s-SUCCEEDED", { timeout: wait(20000) });
  await page.waitForSelector(`#timeline-lineage:has-text("rerun of ${run.run_id} from step ship")`, { timeout: wait(10000) });
  await page.waitForSelector(`#timeline-lineage:has-text("kept from it: approve, build")`, { timeout: wait(10000) });
});
await page.screenshot({ path: `${shots}/rerun.png`, fullPage: true });

// A second run, paused, resumed and cancelled with the buttons on its timeline.
const second = await api("POST", "/api/v1/runs", { workflow: "browser-release", inputs: { version: "2.5.0" } });
const row2 = `tr[data-run="${second.run_id}"]`;
await step("the second run waits at its gate", () => page.waitForSelector(`${row2} .s-WAITING`, { timeout: wait(20000) }));
await page.click(row2);
await page.click("#run-pause");
await step("the pause button pauses it", () => page.waitForSelector(`${row2} .s-PAUSED`, { timeout: wait(10000) }));
await page.screenshot({ path: `${shots}/paused.png`, fullPage: true });
await page.click("#run-resume");
await step("the resume button resumes it", () => page.waitForSelector(`${row2} .s-WAITING`, { timeout: wait(10000) }));
page.once("dialog", (dialog) => dialog.accept());
await page.click("#run-cancel");
await step("the cancel button cancels it", () => page.waitForSelector(`${row2} .s-CANCELLED`, { timeout: wait(10000) }));

// Two more runs picked in the list and cancelled with one bulk action.
const third = await api("POST", "/api/v1/runs", { workflow: "browser-release", inputs: { version: "2.6.0" } });
const fourth = await api("POST", "/api/v1/runs", { workflow: "browser-release", inputs: { version: "2.7.0" } });
for (const r of [third, fourth]) {
  await step("a run waits at its gate", () => page.waitForSelector(`tr[data-run="${r.run_id}"] .s-WAITING`, { timeout: wait(20000) }));
}

// The whole workflow paused from the Workflows tab: both runs are held; resumed, they wait
// at their gates again.
await page.click("#tabs button[data-tab=workflows]");
const wf = `#workflow-rows tr[data-workflow="browser-release"]`;
await step("the workflow is listed with its version", () => page.waitForSelector(`${wf}:has-text('1.0.0') button.pause`, { timeout: wait(10000) }));
page.once("dialog", (dialog) => dialog.accept("release freeze"));
await page.click(`${wf} button.pause`);
await step("the pause button pauses the workflow", () => page.waitForSelector(`${wf} .s-PAUSED`, { timeout: wait(10000) }));
await step("the pause says why", () => page.waitForSelector(`${wf}:has-text('release freeze')`, { timeout: wait(5000) }));
await page.screenshot({ path: `${shots}/workflow-paused.png`, fullPage: true });
await page.click("#tabs button[data-tab=runs]");
for (const r of [third, fourth]) {
  await step("the paused workflow holds its runs", () => page.waitForSelector(`tr[data-run="${r.run_id}"] .s-PAUSED`, { timeout: wait(20000) }));
}
await page.click("#tabs button[data-tab=workflows]");
await page.click(`${wf} button.resume`);
await step("the resume button resumes the workflow", () => page.waitForSelector(`${wf} .s-ACTIVE`, { timeout: wait(10000) }));
await page.click("#tabs button[data-tab=runs]");
for (const r of [third, fourth]) {
  await step("a held run goes on", () => page.waitForSelector(`tr[data-run="${r.run_id}"] .s-WAITING`, { timeout: wait(20000) }));
  await page.check(`tr[data-run="${r.run_id}"] input.pick`);
}
await step("the bulk bar counts the picked runs", () => page.waitForSelector("#bulk-count:has-text('2 runs selected')", { timeout: wait(5000) }));
await page.selectOption("#bulk-action", "cancel");
page.once("dialog", (dialog) => dialog.accept());
await page.click("#bulk-apply");
await step("the bulk action completes", () => page.waitForSelector("#bulk-status:has-text('2 of 2 done (2 acted on')", { timeout: wait(20000) }));
for (const r of [third, fourth]) {
  await step("a picked run is cancelled", () => page.waitForSelector(`tr[data-run="${r.run_id}"] .s-CANCELLED`, { timeout: wait(10000) }));
}
await step("the cancelled runs' gates leave the inbox", () => page.waitForSelector("#inbox-count", { state: "hidden", timeout: wait(10000) }));
await page.screenshot({ path: `${shots}/bulk.png`, fullPage: true });

// The two cancelled runs picked again and rerun from their gate: `build` is kept, and
// both new runs wait at the gate.
for (const r of [third, fourth]) await page.check(`tr[data-run="${r.run_id}"] input.pick`);
await page.selectOption("#bulk-action", "rerun");
await step("a rerun asks for its step", () => page.waitForSelector("#bulk-from", { state: "visible", timeout: wait(5000) }));
await page.fill("#bulk-from", "approve");
page.once("dialog", (dialog) => dialog.accept());
await page.click("#bulk-apply");
await step("the bulk rerun completes", () => page.waitForSelector("#bulk-status:has-text('rerun: 2 of 2 done (2 acted on')", { timeout: wait(20000) }));
await step("the reruns wait at their gates", () => page.waitForSelector("#inbox-count:has-text('2')", { timeout: wait(20000) }));

// Learning: the team's agent does two sequences of tool calls three times each, one task
// per time; the server's learner proposes both.
const agent = await api("POST", "/api/v1/agents", { capabilities: ["triage"] }, agentToken);
const SEQUENCES = {
  file: (t) => [["echo", { message: t }, { message: t }], ["noop", { ticket: t, queue: "triage" }, { ticket: t }], ["noop", { ticket: t, done: true }, { ticket: t }]],
  close: (t) => [["noop", { ticket: t }, { ticket: t }], ["echo", { message: "closing " + t }, { message: "closing " + t }], ["echo", { message: "closed" }, { message: "closed" }]],
};
for (const [kind, calls] of Object.entries(SEQUENCES)) {
  for (let n = 0; n < 3; n++) {
    const ticket = `${kind.toUpperCase()}-${n}`;
    const task = await api("POST", "/api/v1/tasks", { prompt: `${kind} ${ticket}`, capabilities: ["triage"] });
    const got = await api("POST", `/api/v1/agents/${agent.agent_id}/wait`, { timeout_seconds: 10 }, agentToken);
    if (!got.task || got.task.task_id !== task.task_id) fail(`the agent was not given ${ticket}: ${JSON.stringify(got)}`);
    await api("POST", `/api/v1/tasks/${task.task_id}/ack`, {}, agentToken);
    for (const [name, parameters, output] of calls(ticket)) {
      await api("POST", `/api/v1/tasks/${task.task_id}/tool-calls`, { name, parameters, output, duration_ms: 5, success: true }, agentToken);
    }
    await api("POST", `/api/v1/tasks/${task.task_id}/complete`, { result: { ticket } }, agentToken);
  }
}
await page.click("#tabs button[data-tab=learned]");
const filing = ".proposal:has-text('echo → noop → noop')";
const closing = ".proposal:has-text('noop → echo → echo')";
await step("the learner proposes both sequences", async () => {
  await page.waitForSelector(`${filing} button.approve`, { timeout: wait(20000) });
  await page.waitForSelector(`${closing} button.reject`, { timeout: wait(20000) });
  await page.waitForSelector("#learned-count:has-text('2')", { timeout: wait(10000) });
});
await step("a proposal shows its evidence and its file", async () => {
  await page.waitForSelector(`${filing}:has-text('3 of 3 succeeded')`, { timeout: wait(5000) });
  await page.waitForSelector(`${filing}:has-text('team:alpha')`, { timeout: wait(5000) });
  await page.click(`${filing} summary`);
  await page.waitForSelector(`${filing} pre:has-text('id: "s1_echo"')`, { timeout: wait(5000) });
});
const learned = await page.getAttribute(filing, "data-workflow");
await page.screenshot({ path: `${shots}/learned.png`, fullPage: true });
await page.click(`${filing} button.approve`);
await step("the approved proposal leaves the open ones", () => page.waitForSelector(filing, { state: "detached", timeout: wait(10000) }));
page.once("dialog", (dialog) => dialog.accept("we close tickets by hand"));
await page.click(`${closing} button.reject`);
await step("the rejected proposal leaves the open ones", async () => {
  await page.waitForSelector(closing, { state: "detached", timeout: wait(10000) });
  await page.waitForSelector("#learned-count", { state: "hidden", timeout: wait(10000) });
});
await page.selectOption("#proposal-status", "");
await step("every proposal shows its decision", async () => {
  await page.waitForSelector(`${filing} .s-APPROVED`, { timeout: wait(10000) });
  await page.waitForSelector(`${closing}:has-text('we close tickets by hand') .s-REJECTED`, { timeout: wait(10000) });
});
await step("the approved workflow is in use", () => page.waitForSelector(`#use-rows tr[data-workflow="${learned}"]`, { timeout: wait(10000) }));
await page.screenshot({ path: `${shots}/learned-decided.png`, fullPage: true });
await page.click("#tabs button[data-tab=workflows]");
await step("the approved workflow is registered", () => page.waitForSelector(`#workflow-rows tr[data-workflow="${learned}"]:has-text('1.0.0')`, { timeout: wait(10000) }));

await page.click("#tabs button[data-tab=analytics]");
await step("analytics draws a chart", () => page.waitForSelector(".stat:has-text('browser-release') svg.chart rect", { timeout: wait(10000) }));
await page.screenshot({ path: `${shots}/analytics.png`, fullPage: true });
// Model use: awl's own agent `helper` asked a question while the Models tab is open; the
// tab follows the model_use view and shows the call without a reload.
await page.click("#tabs button[data-tab=models]");
await step("the models tab starts empty", () => page.waitForSelector("#model-rows:has-text('no model calls yet')", { timeout: wait(10000) }));
const answered = await api("POST", "/api/v1/solve", { agent: "helper", prompt: "Say hello." });
if (answered.status !== "finished") fail("the solve did not finish: " + JSON.stringify(answered));
await step("the model's use shows up live", async () => {
  await page.waitForSelector(`#model-rows tr[data-key="tiny"] td.calls:has-text('1')`, { timeout: wait(10000) });
  await page.waitForSelector(`#solve-rows tr[data-solve="${answered.solve_id}"]:has-text('helper'):has-text('FINISHED')`, { timeout: wait(10000) });
});
await page.selectOption("#model-group", "agent");
await step("model use per agent", () => page.waitForSelector(`#model-rows tr[data-key="helper"]`, { timeout: wait(10000) }));
await page.selectOption("#model-group", "workflow");
await step("model use per workflow", () => page.waitForSelector(`#model-rows tr[data-key=""]:has-text('asked directly')`, { timeout: wait(10000) }));
await page.screenshot({ path: `${shots}/models.png`, fullPage: true });

await page.click("#tabs button[data-tab=agents]");
await step("the agents tab renders", () => page.waitForSelector("#agent-rows tr", { timeout: wait(10000) }));

if (!(await page.evaluate(() => window.__noReload === true))) fail("the page reloaded");
if (errors.length) fail("the page threw: " + errors.join("; "));
await browser.close();
console.log("dashboard: ok");
