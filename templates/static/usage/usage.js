// The usage page's charts: stacked bars per day and group (Chart.js, vendored: its UMD build
// sets globalThis.Chart when imported), from the JSON the page embeds (#usage-data; built by
// usage/selectors.py). An ES module.
import "../vendor/chartjs/chart.umd.min.js";
import { pageLanguage } from "../chat/app/i18n.js";

const PALETTE = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];

const node = document.getElementById("usage-data");
if (node && globalThis.Chart) {
  const data = JSON.parse(node.textContent);
  chart(data, "chart-tokens", "tokens");
  chart(data, "chart-cost", "cost");
}

function chart(data, id, key) {
  const canvas = document.getElementById(id);
  if (!canvas) return;
  canvas.chart = new globalThis.Chart(canvas, {
    type: "bar",
    data: {
      labels: data.days,
      datasets: data.series.map((s, n) => ({label: s.label, data: s[key], backgroundColor: PALETTE[n % PALETTE.length]})),
    },
    options: {
      animation: false,
      locale: pageLanguage(),  // the axes' numbers in the page's language
      responsive: true,
      scales: {x: {stacked: true}, y: {stacked: true, beginAtZero: true}},
      plugins: {legend: {position: "bottom"}},
    },
  });
}
