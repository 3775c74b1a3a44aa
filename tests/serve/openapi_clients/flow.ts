// A scripted flow against the live server, typed by the client openapi-typescript generated
// from /openapi.json (./api.d.ts): it does not compile when a write route's body is untyped.
import type { components, paths } from "./api";

declare const process: { argv: string[]; exit(code: number): never };

type IsNever<T> = [T] extends [never] ? true : false;

type AppendBody = NonNullable<paths["/v1/sessions/{session_id}/messages"]["post"]["requestBody"]>["content"]["application/json"];
type CreateBody = NonNullable<paths["/v1/sessions/{session_id}"]["put"]["requestBody"]>["content"]["application/json"];
type PatchBody = NonNullable<paths["/v1/sessions/{session_id}"]["patch"]["requestBody"]>["content"]["application/json"];
type TurnBody = NonNullable<paths["/v1/sessions/{session_id}/turns"]["post"]["requestBody"]>["content"]["application/json"];
type CompactBody = NonNullable<paths["/v1/sessions/{session_id}/compact"]["post"]["requestBody"]>["content"]["application/json"];
// every write route's body is typed: each line fails to compile when its body is `never`
const typed: [false, false, false, false, false] = [
  false as IsNever<AppendBody>,
  false as IsNever<CreateBody>,
  false as IsNever<PatchBody>,
  false as IsNever<TurnBody>,
  false as IsNever<CompactBody>,
];

type Messages = components["schemas"]["Messages"];
type Turn = components["schemas"]["Turn"];
type SessionInfo = components["schemas"]["SessionInfo"];

const [port, token] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}/v1/sessions/${encodeURIComponent("ts/flow")}`;

async function call<T>(method: string, url: string, body?: unknown, headers: Record<string, string> = {}): Promise<[number, T]> {
  const answer = await fetch(url, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return [answer.status, (await answer.json()) as T];
}

function check(ok: boolean, what: string): void {
  if (!ok) {
    console.error(`failed: ${what}`);
    process.exit(1);
  }
}

async function main(): Promise<void> {
  const create: CreateBody = { source: "ts", metadata: { team: "web" } };
  const [created, info] = await call<SessionInfo>("PUT", base, create);
  check(created === 201 && info.id === "ts/flow", "PUT creates the session");
  const ask: AppendBody = { role: "user", content: "hello from TypeScript" };
  const [first] = await call<Messages>("POST", `${base}/messages`, ask, { "Idempotency-Key": "ts-1" });
  const [again, replay] = await call<Messages>("POST", `${base}/messages`, ask, { "Idempotency-Key": "ts-1" });
  check(first === 201 && again === 200 && replay.messages[0].key === "ts-1", "a repeated key is answered 200");
  const open: TurnBody = { on_busy: "reject" };
  const [opened, turn] = await call<Turn>("POST", `${base}/turns`, open, { "Idempotency-Key": "ts-turn" });
  check(opened === 201 && typeof turn.turn === "string", "a keyed turn opens");
  const reply: AppendBody = [{ role: "assistant", content: "hi" }];
  const [inTurn] = await call<Messages>("POST", `${base}/messages?turn=${turn.turn}`, reply);
  check(inTurn === 201, "an append inside the turn");
  const [closed] = await call<Turn>("DELETE", `${base}/turns/${turn.turn}`);
  check(closed === 200, "the turn closes");
  const patch: PatchBody = { metadata: { team: null } };
  check((await call<SessionInfo>("PATCH", base, patch))[0] === 200, "PATCH merges metadata");
  const compact: CompactBody = { force: true };
  check((await call<unknown>("POST", `${base}/compact`, compact))[0] === 200, "compact answers its outcome");
  const [read, live] = await call<Messages>("GET", `${base}/messages`);
  check(read === 200 && live.messages.some((m) => m.content === "hi"), "the transcript reads back");
  console.log(JSON.stringify({ typed, messages: live.messages.length }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
