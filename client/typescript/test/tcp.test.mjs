// The Sandbox over the service's TCP listener with a bearer token.
import assert from "node:assert/strict";

import { ForbiddenError, Sandbox } from "../dist/index.js";
import { cases, it, required } from "./cases.mjs";

const url = required("JAILCELL_URL");
const token = required("JAILCELL_TOKEN");

cases("tcp with a token", () => ({ url, token }), { badRequestStatus: 400 });

it("refuses a wrong token with a typed error (401)", async () => {
  await assert.rejects(Sandbox.create({ url, token: "x".repeat(40) }), (e) => {
    assert.ok(e instanceof ForbiddenError, String(e));
    assert.equal(e.status, 401);
    assert.equal(e.code, "forbidden");
    return true;
  });
  await assert.rejects(Sandbox.create({ url, token: "" }), ForbiddenError);
});

it("refuses two ways to connect", async () => {
  await assert.rejects(Sandbox.create({ url, socket: "/x" }), /not socket and url|socket and url|url and/);
});
