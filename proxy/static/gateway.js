// noVNC client of the safeshare gateway. The session token is in an HttpOnly cookie that the browser sends with the
// WebSocket upgrade; the page never sees it. No clipboard is wired up (the proxy drops cut text in any case).
import RFB from '../novnc/core/rfb.js';

const status = document.getElementById('status');
const state = { state: 'connecting', desktopName: null, clean: null };
window.safeshare = state;

function show(newState, text) {
    state.state = newState;
    status.dataset.state = newState;
    status.textContent = text;
}

const url = new URL('websockify', window.location.href);
url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
url.search = '';
url.hash = '';

const rfb = new RFB(document.getElementById('screen'), url.href, { wsProtocols: ['binary'] });
rfb.scaleViewport = true;
rfb.resizeSession = false;
rfb.showDotCursor = true;
state.rfb = rfb;

rfb.addEventListener('connect', () => show('connected', 'Connected'));
rfb.addEventListener('disconnect', (event) => {
    state.clean = event.detail.clean;
    show('disconnected', 'Session ended. Reload the page to reconnect while your link is valid.');
});
rfb.addEventListener('securityfailure', (event) => {
    show('disconnected', 'Refused: ' + (event.detail.reason || 'security failure'));
});
rfb.addEventListener('desktopname', (event) => {
    state.desktopName = event.detail.name;
    document.title = event.detail.name + ' · safeshare';
});
