// The settings page's connected services (#mcp-connections): the person's connections to the
// OAuth MCP servers (/api/v1/mcp/connections/) — connect (the server's consent page, back to
// this page) or disconnect (revoked at the server). Hidden when no such server is enabled.
import { api, urlFor } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { button, el, timeElement } from "./dom.js";
import { gettext, interpolate } from "./i18n.js";

const section = document.getElementById("mcp-connections");
if (section) {
  const body = section.querySelector("tbody");
  const error = document.getElementById("mcp-connections-error");
  const showError = (message) => { error.textContent = message || ""; error.hidden = !message; };
  const STATUS = {
    connected: gettext("connected"), expired: gettext("expired — connect again"),
    error: gettext("error — connect again"), not_connected: gettext("not connected"),
  };
  const cell = (content, label) => {
    const td = el("td");
    td.dataset.label = label;
    if (content instanceof Node) td.append(content); else td.textContent = content;
    return td;
  };

  function action(c) {
    if (c.status === "connected") {
      return button(gettext("Disconnect"), "deny revoke", () => disconnect(c),
                    interpolate(gettext("Disconnect %s"), [c.name]));
    }
    const link = el("a", "button connect-link", interpolate(gettext("Connect %s"), [c.name]));
    if (c.connect_url.startsWith("/") && !c.connect_url.startsWith("//")) {
      link.href = c.connect_url + "?next=" + encodeURIComponent(location.pathname);
    }
    return link;
  }

  function row(c) {
    const tr = el("tr");
    tr.dataset.server = c.server;
    tr.append(
      cell(c.name, gettext("Service")),
      cell(el("span", c.status === "connected" ? "ok-note" : "muted", STATUS[c.status] || c.status), gettext("Status")),
      cell(c.connected_at && c.status !== "not_connected" ? timeElement(c.connected_at) : "—", gettext("Connected")),
      cell(action(c), ""),
    );
    return tr;
  }

  async function load() {
    try {
      const rows = await api("GET", section.dataset.urlList);
      body.replaceChildren(...rows.map(row));
      section.hidden = rows.length === 0;
    } catch (e) {
      section.hidden = false;
      showError(interpolate(gettext("Could not load your connected services: %s"), [e.message]));
    }
  }

  async function disconnect(c) {
    const ok = await confirmDialog({
      title: interpolate(gettext("Disconnect %s?"), [c.name]), confirmLabel: gettext("Disconnect"), danger: true,
      message: interpolate(gettext("Your sign-in at %s is revoked. A chat that needs it will ask you to connect again."),
                           [c.name]),
    });
    if (!ok) return;
    try {
      await api("DELETE", urlFor(section.dataset.urlDetail, c.server));
      await load();
    } catch (e) {
      showError(interpolate(gettext("Not disconnected: %s"), [e.message]));
    }
  }

  load();
}
