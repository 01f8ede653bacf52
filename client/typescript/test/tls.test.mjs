// The Sandbox over the service's TCP listener with mutual TLS: the client
// certificate's common name is the owner.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import { Sandbox, UnavailableError } from "../dist/index.js";
import { cases, it, required } from "./cases.mjs";

const url = required("JAILCELL_TLS_URL");
const ca = readFileSync(required("JAILCELL_TLS_CA"));
const cert = readFileSync(required("JAILCELL_TLS_CERT"));
const key = readFileSync(required("JAILCELL_TLS_KEY"));

cases("tcp with mutual TLS", () => ({ url, tls: { ca, cert, key } }), { badRequestStatus: 400 });

it("fails the handshake without a client certificate", async () => {
  await assert.rejects(Sandbox.create({ url, tls: { ca } }), (e) => e instanceof UnavailableError && e.message.includes(new URL(url).host));
});

it("refuses a server its CA did not sign", async () => {
  await assert.rejects(Sandbox.create({ url, tls: { cert, key } }), (e) => e instanceof UnavailableError && /certificate/i.test(e.message));
});
