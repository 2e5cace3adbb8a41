// safeshare session player: draws a prepared session (keyframes + deltas, see proxy/audit/player.py) on a canvas.
// Seeking fetches one byte range of frames.bin: the last keyframe at or before the target time and the deltas up to
// it, so a seek costs the same at minute 1 and at minute 59. Everything is fetched with the auditor's API key.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const T = 0, KEY = 1, X = 2, Y = 3, OFF = 6, LEN = 7, SW = 8, SH = 9;
  const canvas = $('screen');
  const s = { key: sessionStorage.getItem('safeshare-key'), session: null, index: null, t: 0, applied: -1,
              playing: false, speed: 1, state: 'idle', target: null, worker: null, lastTick: 0, error: null };

  async function api(path, options = {}) {
    const response = await fetch(path, { ...options, cache: 'no-store',
      headers: { ...(options.headers || {}), Authorization: 'Bearer ' + s.key } });
    if (!response.ok && response.status !== 206) {
      throw new Error(`${path}: ${response.status} ${await response.text()}`);
    }
    return response;
  }

  function lastAtOrBefore(t) {
    const times = s.index.frame_times;
    let lo = 0, hi = times.length - 1, found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (times[mid] <= t) { found = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return found;
  }

  function keyframeAtOrBefore(i) {
    const frames = s.index.frames;
    while (i >= 0 && !frames[i][KEY]) i -= 1;
    return i;
  }

  async function draw(from, to) {
    const frames = s.index.frames;
    const start = frames[from][OFF], end = frames[to][OFF] + frames[to][LEN] - 1;
    const response = await api(s.index.frames_url, { headers: { Range: `bytes=${start}-${end}` } });
    const buffer = await response.arrayBuffer();
    const base = response.status === 206 ? start : 0;
    const bitmaps = await Promise.all(frames.slice(from, to + 1).map((f) =>
      createImageBitmap(new Blob([buffer.slice(f[OFF] - base, f[OFF] - base + f[LEN])], { type: 'image/png' }))));
    const g = canvas.getContext('2d');
    bitmaps.forEach((bitmap, k) => {
      const f = frames[from + k];
      if (f[KEY]) {
        if (canvas.width !== f[SW] || canvas.height !== f[SH]) { canvas.width = f[SW]; canvas.height = f[SH]; }
        g.drawImage(bitmap, 0, 0);
      } else {
        g.drawImage(bitmap, f[X], f[Y]);
      }
      bitmap.close();
    });
    s.applied = to;
  }

  async function showAt(t) {
    const last = lastAtOrBefore(t);
    if (last < 0) {
      const g = canvas.getContext('2d');
      g.fillStyle = '#000'; g.fillRect(0, 0, canvas.width, canvas.height);
      s.applied = -1;
      return;
    }
    if (last === s.applied) return;
    const key = keyframeAtOrBefore(last);
    const from = (s.applied >= key && last > s.applied) ? s.applied + 1 : key;  // forward within a segment
    await draw(from, last);
  }

  function render(t) {
    s.target = t;
    if (!s.worker) {
      s.worker = (async () => {
        try {
          while (s.target !== null) {
            const goal = s.target;
            s.target = null;
            await showAt(goal);
          }
        } catch (error) {
          s.error = String(error); $('status').textContent = s.error;
        } finally {
          s.worker = null;
          updateClock();
        }
      })();
    }
    return s.worker;
  }

  function drawPointer() {
    // the researcher's pointer from the input log, on its own layer so the screen's pixels stay as recorded
    const layer = $('pointer');
    if (layer.width !== canvas.width || layer.height !== canvas.height) {
      layer.width = canvas.width; layer.height = canvas.height;
    }
    const g = layer.getContext('2d');
    g.clearRect(0, 0, layer.width, layer.height);
    const track = s.index.pointer || [];
    let lo = 0, hi = track.length - 1, found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (track[mid][0] <= s.t) { found = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    if (found < 0) return;
    const [, x, y, buttons] = track[found];
    g.beginPath();
    g.moveTo(x, y); g.lineTo(x, y + 16); g.lineTo(x + 4, y + 12); g.lineTo(x + 7, y + 19);
    g.lineTo(x + 10, y + 18); g.lineTo(x + 7, y + 11); g.lineTo(x + 12, y + 11); g.closePath();
    g.fillStyle = buttons ? '#e74c3c' : '#ffffff'; g.strokeStyle = '#000000';
    g.fill(); g.stroke();
  }

  function fmt(seconds) {
    const m = Math.floor(seconds / 60), sec = seconds - 60 * m;
    return `${String(m).padStart(2, '0')}:${sec.toFixed(1).padStart(4, '0')}`;
  }

  function shownWall() {
    if (s.applied < 0) return null;
    return new Date((s.index.start + s.index.frames[s.applied][T]) * 1000);
  }

  function updateClock() {
    if (!s.index) return;
    drawPointer();
    const wall = shownWall();
    $('clock').textContent = `${fmt(s.t)} / ${fmt(s.index.duration)}` +
      (wall ? ` · frame at ${wall.toISOString().replace('T', ' ').replace('Z', ' UTC')}` : '');
    $('seek').value = String(s.t);
  }

  async function seek(t) {
    s.t = Math.max(0, Math.min(s.index.duration, t));
    updateClock();
    await render(s.t);
    if (s.worker) await s.worker;
  }

  function tick() {
    if (!s.playing) return;
    const now = performance.now();
    s.t = Math.min(s.index.duration, s.t + (now - s.lastTick) / 1000 * s.speed);
    s.lastTick = now;
    render(s.t);
    updateClock();
    if (s.t >= s.index.duration) { pause(); return; }
    setTimeout(tick, 40);
  }

  function play() {
    if (!s.index || s.playing) return;
    if (s.t >= s.index.duration) s.t = 0;
    s.playing = true; s.state = 'playing'; s.lastTick = performance.now();
    $('play').textContent = 'Pause';
    tick();
  }

  function pause() {
    s.playing = false; s.state = 'paused';
    $('play').textContent = 'Play';
  }

  function setSpeed(x) {
    s.speed = Number(x);
    $('speed').value = String(x);
  }

  function buildMarkers() {
    const holder = $('markers');
    holder.textContent = '';
    for (const m of s.index.markers) {
      const b = document.createElement('button');
      b.className = `marker ${m.kind}`;
      b.title = `${fmt(m.t)} ${m.event} ${m.detail}`;
      b.style.left = `${(100 * m.t / Math.max(s.index.duration, 0.001)).toFixed(3)}%`;
      b.dataset.t = m.t;
      b.addEventListener('click', () => seek(m.t));
      holder.appendChild(b);
    }
  }

  function buildKeys() {
    const list = $('keys');
    list.textContent = '';
    for (const k of s.index.keys) {
      const li = document.createElement('li');
      li.className = k.status;
      li.dataset.t = k.t;
      const time = document.createElement('span'); time.className = 't'; time.textContent = fmt(k.t);
      const label = document.createElement('span'); label.className = 'label'; label.textContent = k.label;
      li.append(time, label);
      if (k.status !== 'forwarded') li.title = k.status;
      li.addEventListener('click', () => seek(k.t));
      list.appendChild(li);
    }
  }

  function filterKeys(text) {
    const needle = text.toLowerCase();
    for (const li of $('keys').children) {
      li.classList.toggle('hidden', Boolean(needle) && !li.textContent.toLowerCase().includes(needle) &&
                                    !li.className.includes(needle));
    }
  }

  async function open(key, session) {
    s.key = key; sessionStorage.setItem('safeshare-key', key);
    s.state = 'loading'; $('status').textContent = 'preparing…';
    s.index = await (await api(`/audit/sessions/${encodeURIComponent(session)}/player`)).json();
    s.session = session; s.applied = -1; s.t = 0;
    canvas.width = s.index.width; canvas.height = s.index.height;
    $('seek').max = String(s.index.duration);
    $('title').textContent = `${session} · ${s.index.recipient || '?'} · ${s.index.release || '?'}` +
      (s.index.verified ? ' · verified'
        : (s.index.integrity && s.index.integrity.sealed_sha256 && !s.index.integrity.matches_seal)
          ? ' · TAMPERED: this recording is not the one sealed (run safeshare audit verify)'
        : s.index.partial
          ? ` · PARTIAL: recovered after a gateway crash, lines 1-${s.index.partial.verified_lines} verified, ` +
            `${s.index.partial.unverified_lines} line(s) after its last checkpoint unverifiable`
          : ' · INTEGRITY FINDINGS (run safeshare audit verify)');
    $('login').classList.add('hidden'); $('pick').classList.add('hidden'); $('view').classList.remove('hidden');
    buildMarkers(); buildKeys();
    await seek(0);
    s.state = 'ready'; $('status').textContent = `${s.index.frames.length} frames, ${s.index.markers.length} markers`;
  }

  async function login(key) {
    s.key = key; sessionStorage.setItem('safeshare-key', key);
    const sessions = await (await api('/audit/sessions')).json();
    const select = $('sessions');
    select.textContent = '';
    for (const item of sessions) {
      const option = document.createElement('option');
      option.value = item.session;
      option.textContent = `${item.session} · ${item.recipient || '?'} · ${item.flagged ? 'flagged' : ''}` +
        (item.recovered ? ` · recovered: ${item.unverified_lines ?? '?'} line(s) unverifiable` : '');
      select.appendChild(option);
    }
    $('login').classList.add('hidden'); $('pick').classList.remove('hidden');
  }

  $('login').addEventListener('submit', (event) => { event.preventDefault(); login($('key').value).catch(fail); });
  $('load').addEventListener('click', () => open(s.key, $('sessions').value).catch(fail));
  $('play').addEventListener('click', () => (s.playing ? pause() : play()));
  $('speed').addEventListener('change', (event) => setSpeed(event.target.value));
  $('seek').addEventListener('input', (event) => seek(Number(event.target.value)));
  $('filter').addEventListener('input', (event) => filterKeys(event.target.value));

  function fail(error) { s.error = String(error); s.state = 'error'; $('status').textContent = s.error; }

  const wanted = new URLSearchParams(location.hash.slice(1)).get('session');
  if (s.key && wanted) open(s.key, wanted).catch(fail);

  window.player = {
    get state() { return s.state; }, get t() { return s.t; }, get index() { return s.index; },
    get error() { return s.error; }, get appliedFrame() { return s.applied; },
    get pointerDrawn() {
      const d = $('pointer').getContext('2d').getImageData(0, 0, $('pointer').width, $('pointer').height).data;
      for (let i = 3; i < d.length; i += 4) if (d[i]) return true;
      return false;
    },
    shownWall, open, seek, play, pause, setSpeed, filterKeys,
  };
})();
