// The login page (served without a session). A link from `gpuq dashboard`
// carries a one-time code in the fragment (#code=…), which never reaches a
// server log; it is exchanged for a session (an HttpOnly cookie, and a CSRF
// secret kept in this origin's localStorage as `gpuq.csrf`, which the app sends
// with every request) and wiped from the address bar. Without a link, an API
// token can be pasted instead.
(function () {
  'use strict';
  var KEY = 'gpuq.lang';
  var CSRF_KEY = 'gpuq.csrf';
  var USER_KEY = 'gpuq.user';
  // A page asked for before logging in (/#/job/7 → /login#/job/7) opens after it.
  var next = /^#\/[^#]*$/.test(location.hash || '') ? location.hash : '';
  // A notebook (`gpuq notebook`'s link, or the notebook's own address before
  // logging in) opens after it: only a path of this origin's /sessions/.
  var session = /(?:^#|&)next=(\/sessions\/\d+\/[A-Za-z0-9_\-.\/]*)/.exec(location.hash || '');
  var after = session ? session[1] : '/' + next;
  var S = {
    en: {
      title: 'Log in', token: 'API token', submit: 'Log in', working: 'Logging in…',
      help: 'Open the link that `gpuq dashboard` prints, or paste an API token (`gpuq token create`, or the daemon\'s token file).',
      network: 'Cannot reach the gpuq daemon.', failed: 'Login failed (HTTP {status}).', lang: 'Language', page: 'gpuq · Log in',
      linkAsk: 'This link logs you in as {user}.', linkSwitch: 'This browser is logged in as {current}: that session ends.',
      linkYes: 'Log in as {user}', linkNo: 'Cancel',
    },
    'zh-CN': {
      title: '登录', token: 'API 令牌', submit: '登录', working: '正在登录…',
      help: '打开 `gpuq dashboard` 打印的链接，或粘贴一个 API 令牌（`gpuq token create`，或守护进程的 token 文件）。',
      network: '无法连接 gpuq 守护进程。', failed: '登录失败（HTTP {status}）。', lang: '语言', page: 'gpuq · 登录',
      linkAsk: '此链接将以 {user} 的身份登录。', linkSwitch: '此浏览器当前以 {current} 登录：该会话将结束。',
      linkYes: '以 {user} 登录', linkNo: '取消',
    },
  };
  function pick() {
    var stored = null;
    try { stored = localStorage.getItem(KEY); } catch (e) { /* storage off */ }
    if (stored && S[stored]) return stored;
    var langs = navigator.languages || [navigator.language || 'en'];
    for (var i = 0; i < langs.length; i++) {
      if (/^zh\b/i.test(langs[i])) return 'zh-CN';
      if (/^en\b/i.test(langs[i])) return 'en';
    }
    return 'en';
  }
  var lang = pick();
  function t(k, vars) {
    var s = S[lang][k] || S.en[k] || k;
    return s.replace(/\{(\w+)\}/g, function (m, v) { return vars && v in vars ? String(vars[v]) : m; });
  }
  var $ = function (id) { return document.getElementById(id); };

  function texts() {
    document.documentElement.lang = lang;
    document.title = t('page');
    $('login-title').textContent = t('title');
    $('token-label').textContent = t('token');
    $('login-submit').textContent = t('submit');
    $('login-help').textContent = t('help');
    $('lang-select').value = lang;
    $('lang-select').setAttribute('aria-label', t('lang'));
  }

  function status(s) { $('login-status').textContent = s || ''; }
  function error(s) {
    var e = $('login-error');
    e.textContent = s || '';
    e.hidden = !s;
  }
  function showForm() {
    $('login-form').hidden = false;
    $('token').focus();
  }

  function login(body) {
    error('');
    status(t('working'));
    $('login-submit').disabled = true;
    return fetch('/auth/login', {
      method: 'POST',
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(body),
    }).then(function (res) {
      if (res.ok) {
        return res.json().catch(function () { return {}; }).then(function (s) {
          try {
            if (s && s.csrf) localStorage.setItem(CSRF_KEY, s.csrf);
            if (s && s.user) localStorage.setItem(USER_KEY, s.user);
          } catch (e) { /* storage off: the app's requests will be refused */ }
          location.replace(after);
        });
      }
      return res.json().catch(function () { return {}; }).then(function (j) {
        throw new Error(j && j.error ? j.error : t('failed', { status: res.status }));
      });
    }, function () {
      throw new Error(t('network'));
    }).catch(function (e) {
      status('');
      error(e.message);
      $('login-submit').disabled = false;
      showForm();
    });
  }

  // #code=… from `gpuq dashboard`: for one use, so out of the address bar and the history at once.
  // Whose link it is is asked first and shown with a button: a link another
  // user sent (or a page of another site opened) never replaces a session unseen.
  function fromLink() {
    var m = /(?:^#|&)code=([^&]*)/.exec(location.hash || '');
    if (!m) return false;
    var code;
    try { code = decodeURIComponent(m[1]); } catch (e) { code = m[1]; }
    history.replaceState(null, '', location.pathname + location.search);
    error('');
    fetch('/auth/link', {
      method: 'POST',
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ code: code }),
    }).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (j) {
        if (!res.ok || !j.user) throw new Error(j && j.error ? j.error : t('failed', { status: res.status }));
        return j.user;
      });
    }, function () {
      throw new Error(t('network'));
    }).then(function (user) {
      var current = null;
      try { current = localStorage.getItem(USER_KEY); } catch (e) { /* storage off */ }
      $('link-question').textContent = t('linkAsk', { user: user });
      $('link-switch').textContent = current && current !== user ? t('linkSwitch', { current: current }) : '';
      $('link-switch').hidden = !(current && current !== user);
      $('link-yes').textContent = t('linkYes', { user: user });
      $('link-no').textContent = t('linkNo');
      $('link-confirm').hidden = false;
      $('link-yes').focus();
      $('link-yes').onclick = function () {
        $('link-confirm').hidden = true;
        login({ code: code });
      };
      $('link-no').onclick = function () {
        $('link-confirm').hidden = true;
        showForm();
      };
    }).catch(function (e) {
      error(e.message);
      showForm();
    });
    return true;
  }

  function start() {
    texts();
    $('lang-select').addEventListener('change', function (ev) {
      lang = S[ev.target.value] ? ev.target.value : 'en';
      try { localStorage.setItem(KEY, lang); } catch (e) { /* storage off */ }
      texts();
    });
    $('login-form').addEventListener('submit', function (ev) {
      ev.preventDefault();
      var token = $('token').value.trim();
      if (token) login({ token: token });
    });
    // A link pasted into a tab already on this page changes only the fragment.
    window.addEventListener('hashchange', fromLink);
    if (fromLink()) return;
    showForm();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
