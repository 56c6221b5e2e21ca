"""Independent references of the recurrent family (as fla's naive.py beside its kernels): each
layer written out from its paper's equations, position by position where the paper has a
recurrence, in plain numpy or jax.numpy (jax.numpy where a test takes gradients through it).
Nothing of models/ is imported: a reference that shared the code it checks would check nothing.
Each takes the parameter tree the mixer builds (its names are the layer's parameter names)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# --- elementwise and small pieces ---


def lead(a, ndim):
  """a with leading unit axes up to `ndim` (explicit broadcasting)."""
  a = jnp.asarray(a)
  return a.reshape((1,) * (ndim - a.ndim) + a.shape)


def _xp(x):
  """numpy for numpy input (float64 references), else jax.numpy (traceable)."""
  return np if isinstance(x, (np.ndarray, np.generic, float)) else jnp


def silu(x):
  """x sigmoid(x) = x / (1 + e^-x)."""
  return x / (1.0 + _xp(x).exp(-x))


def softplus(x):
  """log(1 + e^x)."""
  return _xp(x).log1p(_xp(x).exp(x))


def causal_conv(x_BxLxC, w_KxC, b_C=None):
  """y_t = b + sum_j w_j x_{t-(K-1)+j}: the current and the K - 1 previous positions (zeros
  before the start), each channel alone."""
  kernel, length = w_KxC.shape[0], x_BxLxC.shape[1]
  padded = jnp.concatenate([jnp.zeros((x_BxLxC.shape[0], kernel - 1, x_BxLxC.shape[2])),
                            x_BxLxC], axis=1)
  y = sum(w_KxC[j][None, None, :] * padded[:, j:j + length] for j in range(kernel))
  return y if b_C is None else y + lead(b_C, 3)


def dense(p, x, axes=1):
  """x @ kernel (+ bias) over the last `axes` axes of x."""
  y = jnp.tensordot(x, p["kernel"], axes=axes)
  return y + lead(p["bias"], y.ndim) if "bias" in p else y


def rms_norm(o, scale, axes=(-1,), eps=1e-5):
  """o / sqrt(mean(o^2) + eps) over `axes`, times the weight."""
  return o / jnp.sqrt(jnp.mean(o ** 2, axis=axes, keepdims=True) + eps) * lead(scale, o.ndim)


# --- the recurrences, one position at a time ---


def gated_loop(q, k, v, alpha, mask, reverse=False):
  """S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t (a scan over L; alpha a vector
  over the key channels); a padded position leaves S alone and reads 0."""
  batch, _, heads, key = q.shape

  def step(S, xs):
    q_t, k_t, v_t, alpha_t, keep = xs
    new = alpha_t[..., None] * S + k_t[..., :, None] * v_t[..., None, :]
    S = jnp.where(keep[:, None, None, None], new, S)
    return S, jnp.einsum("bhkv,bhk->bhv", S, q_t) * keep[:, None, None]

  xs = [jnp.moveaxis(jnp.asarray(a), 1, 0) for a in (q, k, v, alpha, mask)]
  _, o = jax.lax.scan(step, jnp.zeros((batch, heads, key, v.shape[-1])), xs, reverse=reverse)
  return jnp.moveaxis(o, 0, 1)


def delta_loop(q, k, v, beta, mask, *, alpha=None, reverse=False):
  """o_t = S_t^T q_t with S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, the
  matrix form position by position (a scan over t; alpha 1 without a decay); a padded position
  leaves S and outputs 0."""
  alpha = jnp.ones(beta.shape) if alpha is None else alpha
  batch, _, heads, key = q.shape
  eye = jnp.eye(key)[None, None]

  def step(S, xs):
    q_t, k_t, v_t, b_t, a_t, real = xs  # B x H x K, .., B x H, B
    k_t, b_t = k_t[..., :, None], b_t[..., None, None]  # B x H x K x 1
    transition = a_t[..., None, None] * (eye - b_t * (k_t @ jnp.swapaxes(k_t, -1, -2)))
    written = transition @ S + b_t * (k_t @ v_t[..., None, :])
    S = jnp.where(real[:, None, None, None], written, S)
    o_t = (jnp.swapaxes(S, -1, -2) @ q_t[..., None])[..., 0]
    return S, jnp.where(real[:, None, None], o_t, 0.0)

  xs = [jnp.moveaxis(jnp.asarray(a), 1, 0) for a in (q, k, v, beta, alpha, mask)]
  S = jnp.zeros((batch, heads, key, v.shape[-1]))
  return jnp.moveaxis(jax.lax.scan(step, S, xs, reverse=reverse)[1], 0, 1)


def signed_loop(q, k, v, mask, decay=None, beta=None, log_write=None, reverse=False):
  """The true outputs o_t = S_t^T q_t of S_t = a_t S_{t-1} + w_t k_t v_t^T (or the delta rule
  a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T), the decays a given as the numbers
  themselves (any sign; B x L x H, or B x L x H x K over the key channels), in float64 numpy,
  one position at a time, unstabilised; a padded position is skipped and reads 0."""
  batch, length, heads, key = q.shape
  o = np.zeros((batch, length, heads, v.shape[-1]))
  order = range(length - 1, -1, -1) if reverse else range(length)
  for b, h in np.ndindex(batch, heads):
    S = np.zeros((key, v.shape[-1]))
    for t in order:
      if not mask[b, t]:
        continue
      a = np.ones(key) if decay is None else np.broadcast_to(decay[b, t, h], (key,))
      transition = np.diag(a)
      if beta is not None:
        transition = a[0] * (np.eye(key) - beta[b, t, h] * np.outer(k[b, t, h], k[b, t, h]))
      write = beta[b, t, h] if beta is not None else (
          1.0 if log_write is None else np.exp(log_write[b, t, h]))
      S = transition @ S + write * np.outer(k[b, t, h], v[b, t, h])
      o[b, t, h] = S.T @ q[b, t, h]
  return o


def householder_loop(q, k, v, beta, mask, *, alpha=None, reverse=False):
  """DeltaProduct's recurrence: at each position t (from the end with `reverse`) the state is
  decayed, S = alpha_t S, then taken through its N Householder steps in order,
  S = (I - beta_{t,j} k_{t,j} k_{t,j}^T) S + beta_{t,j} k_{t,j} v_{t,j}^T (the matrix form),
  and read, o_t = S^T q_t; k: B x L x N x H x K, v: B x L x N x H x V, beta: B x L x N x H,
  alpha: B x L x H (1 without a decay). A padded position leaves S and outputs 0."""
  batch, _, steps, heads, key = k.shape
  alpha = jnp.ones((batch, k.shape[1], heads)) if alpha is None else alpha
  eye = jnp.eye(key)[None, None]
  swap = lambda a: jnp.swapaxes(a, -1, -2)

  def step(S, xs):
    q_t, k_t, v_t, b_t, a_t, real = xs  # B x H x K, B x N x H x K, .., B x N x H, B x H, B
    new = a_t[..., None, None] * S
    for j in range(steps):
      k_j, b_j = k_t[:, j][..., :, None], b_t[:, j][..., None, None]
      new = (eye - b_j * (k_j @ swap(k_j))) @ new + b_j * (k_j @ v_t[:, j][..., None, :])
    S = jnp.where(real[:, None, None, None], new, S)
    o_t = (swap(S) @ q_t[..., None])[..., 0]
    return S, jnp.where(real[:, None, None], o_t, 0.0)

  xs = [jnp.moveaxis(jnp.asarray(a), 1, 0) for a in (q, k, v, beta, alpha, mask)]
  S = jnp.zeros((batch, heads, key, v.shape[-1]))
  return jnp.moveaxis(jax.lax.scan(step, S, xs, reverse=reverse)[1], 0, 1)


# --- the layers ---


def gla(p, x, mask, bidirectional=False, normalizer=16.0, combine="mean"):
  """GLA (fla's layer) from its equations; bidirectional: the mean of the forward loop and the
  loop over the reversed sequence, before the norm; combine="gated": each loop weighted by
  2 sigmoid(q . w_d + b_d) of its own direction d first."""
  x = jnp.where(mask[..., None], x, 0.0)
  proj = lambda name: jnp.einsum("bld,dhk->blhk", x, p[name]["kernel"])
  q, k, v, g = (proj(n) for n in ("q_proj", "k_proj", "v_proj", "g_proj"))
  q = q / np.sqrt(q.shape[-1])
  low = x @ p["gk_proj_down"]["kernel"]
  up = p["gk_proj_up"]
  alpha = jax.nn.sigmoid(jnp.einsum("blr,rhk->blhk", low, up["kernel"]) + lead(up["bias"], 4))
  alpha = alpha ** (1.0 / normalizer)
  o = gated_loop(q, k, v, alpha, mask)
  if bidirectional:
    back = gated_loop(q, k, v, alpha, mask, reverse=True)
    if combine == "gated":
      w, b = p["direction_gate"], p["direction_gate_bias"]
      gate = [2 * jax.nn.sigmoid(jnp.einsum("blhk,hk->blh", q, w[d]) + lead(b[d], 3))[..., None]
              for d in (0, 1)]
      o, back = gate[0] * o, gate[1] * back
    o = 0.5 * (o + back)
  o = rms_norm(o, p["output"]["norm"]["scale"]) * g * jax.nn.sigmoid(g)
  return jnp.einsum("blhv,hvd->bld", o, p["output"]["o_proj"]["kernel"]) * mask[..., None]


def rotate(x_BxLxHxK):
  """RoFormer: channel pairs (i, i + K/2) turned by position * 10000^(-2i/K)."""
  length, half = x_BxLxHxK.shape[1], x_BxLxHxK.shape[-1] // 2
  theta = 10000.0 ** (-2.0 * np.arange(half) / (2 * half))
  angle = np.arange(length)[:, None] * theta[None, :]
  cos, sin = (lead(jnp.asarray(f(angle), jnp.float32)[:, None, :], 4) for f in (np.cos, np.sin))
  a, b = x_BxLxHxK[..., :half], x_BxLxHxK[..., half:]
  return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def retention(q, k, v, mask):
  """RetNet's parallel form, head by head: (q k^T * D) v with D[n, m] = gamma_h^(n - m) for
  n >= m (gamma_h = 1 - 2^(-5 - h)), padded keys left out."""
  heads, length = q.shape[2], q.shape[1]
  n, m = np.arange(length)[:, None], np.arange(length)[None, :]
  out = []
  for h in range(heads):
    gamma = 1.0 - 2.0 ** (-5 - h)
    decay_LxL = np.where(n >= m, gamma ** np.maximum(n - m, 0), 0.0)
    scores = jnp.einsum("bnk,bmk->bnm", q[:, :, h], k[:, :, h])
    scores = scores * jnp.asarray(decay_LxL, jnp.float32)[None] * mask[:, None, :]
    out.append(jnp.einsum("bnm,bmv->bnv", scores, v[:, :, h]))
  return jnp.stack(out, axis=2)


def retnet(p, x, mask, bidirectional=False):
  """RetNet (fla's MultiScaleRetention) from its equations; bidirectional: the mean of the
  forward retention and the retention of the reversed sequence, before the norm."""
  x = jnp.where(mask[..., None], x, 0.0)
  proj = lambda name: jnp.einsum("bld,dhk->blhk", x, p[name]["kernel"])
  key = p["q_proj"]["kernel"].shape[-1]
  q, k = rotate(proj("q_proj")) / np.sqrt(key), rotate(proj("k_proj"))
  v, g = proj("v_proj"), proj("g_proj")
  o = retention(q, k, v, mask)
  if bidirectional:
    flip = lambda a: a[:, ::-1]
    o = 0.5 * (o + flip(retention(flip(q), flip(k), flip(v), flip(mask))))
  o = rms_norm(o, p["output"]["norm"]["scale"]) * g * jax.nn.sigmoid(g)
  return jnp.einsum("blhv,hvd->bld", o, p["output"]["o_proj"]["kernel"]) * mask[..., None]


def hgrn2(p, x, mask, bound, variant="fla", bidirectional=False):
  """HGRN2 from its equations: f = lb + (1 - lb) sigmoid(f_proj x), k = 1 - f; fla's layer
  (SiLU q scaled, RMS norm over H V) or the authors' LRA one (sigmoid q, SiLU v, LayerNorm)."""
  x = jnp.where(mask[..., None], x, 0.0)
  q, f, i = (dense(p[n], x) for n in ("q_proj", "f_proj", "i_proj"))
  if variant == "lra":
    q, v = jax.nn.sigmoid(q), i * jax.nn.sigmoid(i)
  else:
    q, v = q * jax.nn.sigmoid(q) / np.sqrt(q.shape[-1]), i
  bound = lead(bound, 4)
  f = bound + (1 - bound) * jax.nn.sigmoid(f)
  o = gated_loop(q, 1 - f, v, f, mask)
  if bidirectional:
    o = 0.5 * (o + gated_loop(q, 1 - f, v, f, mask, reverse=True))
  if variant == "lra":
    mean = jnp.mean(o, axis=(-2, -1), keepdims=True)
    var = jnp.mean((o - mean) ** 2, axis=(-2, -1), keepdims=True)
    o = (o - mean) / jnp.sqrt(var + 1e-5) * lead(p["norm"]["scale"], 4) + \
        lead(p["norm"]["bias"], 4)
  else:
    o = rms_norm(o, p["g_norm"]["scale"], axes=(-2, -1))
  return dense(p["o_proj"], o, axes=2) * mask[..., None]


def delta_net(p, x, mask, heads, *, gated=False, bidirectional=False, use_beta=True,
              use_gate=False, allow_neg_eigval=False, householder=0):
  """fla's DeltaNet layer (gated: GatedDeltaNet's, with the decay
  alpha = exp(-exp(A_log) softplus(a_proj(x) + dt_bias))) written out from its equations;
  householder=N: GatedDeltaProduct's, N keys, values and betas per position (k_proj, v_proj
  and b_proj give them step-major, '(n h d)') and householder_loop."""
  batch, length, _ = x.shape
  x = jnp.where(jnp.asarray(mask)[..., None], x, 0.0)
  steps = (householder,) if householder else ()

  def branch(name, copies=()):
    y = silu(causal_conv(x @ p[f"{name}_proj"]["kernel"], p[f"{name}_conv1d"]["weight"]))
    return y.reshape((batch, length) + copies + (heads, -1))

  unit = lambda a: a / jnp.sqrt(jnp.sum(a * a, -1, keepdims=True) + 1e-6)
  q, k, v = branch("q"), unit(branch("k", steps)), branch("v", steps)
  q = unit(q) / np.sqrt(q.shape[-1])
  beta = 1.0 / (1.0 + jnp.exp(-x @ p["b_proj"]["kernel"])) if use_beta else \
      jnp.ones((batch, length, heads))
  beta = (2 * beta if allow_neg_eigval else beta).reshape((batch, length) + steps + (heads,))
  alpha = None
  if gated:
    dt = softplus(x @ p["a_proj"]["kernel"] + p["dt_bias"][None, None])
    alpha = jnp.exp(-jnp.exp(p["A_log"])[None, None] * dt)
  loop = householder_loop if householder else delta_loop
  o = loop(q, k, v, beta, mask, alpha=alpha)
  if bidirectional:
    o = 0.5 * (o + loop(q, k, v, beta, mask, alpha=alpha, reverse=True))
  o = rms_norm(o, p["o_norm"]["scale"])
  if use_gate:
    o = o * silu(x @ p["g_proj"]["kernel"]).reshape(o.shape)
  return o.reshape(batch, length, -1) @ p["o_proj"]["kernel"]


def mlstm_cell(q, k, v, i, f, mask, reverse=False):
  """xLSTM's stabilised mLSTM, one position at a time (a scan over L; state 0 and m 0 before
  the first): a padded position leaves the state alone and reads 0."""
  batch, _, heads, key = q.shape
  k = k / np.sqrt(key)

  def step(state, xs):
    C, n, m = state
    q_t, k_t, v_t, i_t, f_t, keep = xs
    log_f = jax.nn.log_sigmoid(f_t)
    m_new = jnp.maximum(log_f + m, i_t)
    f_act, i_act = jnp.exp(log_f + m - m_new), jnp.exp(i_t - m_new)
    C_new = f_act[..., None, None] * C + i_act[..., None, None] * (
        k_t[..., :, None] * v_t[..., None, :])
    n_new = f_act[..., None] * n + i_act[..., None] * k_t
    den = jnp.maximum(jnp.abs(jnp.sum(n_new * q_t, -1)), jnp.exp(-m_new)) + 1e-6
    h = jnp.einsum("bhkv,bhk->bhv", C_new, q_t) / den[..., None]
    state = (jnp.where(keep[:, None, None, None], C_new, C),
             jnp.where(keep[:, None, None], n_new, n), jnp.where(keep[:, None], m_new, m))
    return state, h * keep[:, None, None]

  xs = [jnp.moveaxis(a, 1, 0) for a in (q, k, v, i, f, mask)]
  state = (jnp.zeros((batch, heads, key, key)), jnp.zeros((batch, heads, key)),
           jnp.zeros((batch, heads)))
  _, h = jax.lax.scan(step, state, xs, reverse=reverse)
  return jnp.moveaxis(h, 0, 1)


def mlstm(p, x, mask, heads, bidirectional=False, block=2):
  """xLSTM's mLSTM layer from its equations (xlstm/blocks/mlstm/layer.py's order)."""
  x = jnp.where(mask[..., None], x, 0.0)
  up = x @ p["proj_up"]["kernel"]
  inner = up.shape[-1] // 2
  xm, z = up[..., :inner], up[..., inner:]
  xm = jnp.where(mask[..., None], xm, 0.0)
  c = silu(causal_conv(xm, p["conv"]["weight"], p["conv"]["bias"]))

  def headwise(w, a):  # block-diagonal: block b maps channels b*block.. to the same
    blocks = [a[..., b * block:(b + 1) * block] @ w[b].T for b in range(w.shape[0])]
    return jnp.concatenate(blocks, axis=-1)

  q, k, v = (headwise(p[n]["kernel"], a) for n, a in (("q_proj", c), ("k_proj", c),
                                                       ("v_proj", xm)))
  qkv = jnp.concatenate([q, k, v], axis=-1)  # xLSTM's gates: Linear(3E -> H) of cat(q, k, v)
  gate = lambda name: qkv @ p[name + "_kernel"].reshape(3 * inner, heads) + \
      lead(p[name + "_bias"], 3)
  split = lambda a: a.reshape(a.shape[:2] + (heads, inner // heads))
  h = mlstm_cell(split(q), split(k), split(v), gate("igate"), gate("fgate"), mask)
  if bidirectional:
    h = 0.5 * (h + mlstm_cell(split(q), split(k), split(v), gate("igate"), gate("fgate"), mask,
                              reverse=True))
  mean = jnp.mean(h, -1, keepdims=True)
  var = jnp.mean((h - mean) ** 2, -1, keepdims=True)
  h = (h - mean) / jnp.sqrt(var + 1e-5) * lead(p["outnorm"], 4)
  h = (h.reshape(c.shape) + lead(p["learnable_skip"], 3) * c) * silu(z)
  return (h @ p["proj_down"]["kernel"]) * mask[..., None]


def mamba2_row(p, x, settings, bidirectional, xp=np):
  """The Mamba-2 layer on one row's real tokens (L x D). xp = numpy (float64 outputs) or
  jax.numpy (for its gradients): plain loops over positions."""
  n, k_size = settings["d_state"], settings["conv_kernel"]
  groups, head = settings["groups"], settings["head_dim"]
  length, inner = x.shape[0], p["norm"].shape[0]
  heads = inner // head
  heads_per_group = heads // groups
  proj = x @ p["in_proj"]["kernel"]  # [z, x, B, C, dt]
  z, xbc, dt_raw = proj[:, :inner], proj[:, inner:2 * inner + 2 * groups * n], \
      proj[:, 2 * inner + 2 * groups * n:]
  w, b = p["conv"]["weight"], p["conv"]["bias"]
  conv = []
  for t in range(length):  # causal: the current and the K - 1 previous positions
    terms = [w[j] * xbc[t - (k_size - 1) + j] for j in range(k_size) if t - (k_size - 1) + j >= 0]
    conv.append(b + sum(terms))
  u = silu(xp.stack(conv))
  xs = u[:, :inner].reshape(length, heads, head)
  group_of = np.arange(heads) // heads_per_group  # head h reads group h // (H / G)
  B = u[:, inner:inner + groups * n].reshape(length, groups, n)[:, group_of]  # L x H x N
  C = u[:, inner + groups * n:].reshape(length, groups, n)[:, group_of]
  dt = softplus(dt_raw + p["dt_bias"][None])  # L x H
  A = -xp.exp(p["A_log"])

  def scan(order):
    S, y = xp.zeros((heads, n, head)), [None] * length
    for t in order:  # S_t = exp(dt A) S_{t-1} + dt B x^T, y_t = S_t^T C_t
      S = xp.exp(dt[t] * A)[:, None, None] * S + \
          dt[t][:, None, None] * B[t][:, :, None] * xs[t][:, None, :]
      y[t] = xp.einsum("hnp,hn->hp", S, C[t])
    return xp.stack(y)

  y = scan(range(length))
  if bidirectional:
    y = 0.5 * (y + scan(range(length - 1, -1, -1)))
  y = (y + p["D"][None, :, None] * xs).reshape(length, inner)
  g = (y * silu(z)).reshape(length, groups, inner // groups)  # RMSNorm(y SiLU(z)) per group
  g = g / xp.sqrt(xp.mean(g * g, axis=-1, keepdims=True) + 1e-5)
  return (g.reshape(length, inner) * p["norm"][None]) @ p["out_proj"]["kernel"]


def transition_loop(q, k, v, beta, transition, mask, *, reverse=False):
  """o_t = S_t^T q_t with S_t = M_t S_{t-1} + beta_t k_t v_t^T for given K x K transitions M_t
  (B x L x H x K x K: KDA's (I - beta k k^T) diag(a), Comba's a I - beta k p^T), the matrix
  form position by position (a scan over t); a padded position leaves S and outputs 0."""
  batch, _, heads, key = q.shape

  def step(S, xs):
    q_t, k_t, v_t, b_t, M_t, real = xs
    written = M_t @ S + b_t[..., None, None] * (k_t[..., :, None] @ v_t[..., None, :])
    S = jnp.where(real[:, None, None, None], written, S)
    o_t = (jnp.swapaxes(S, -1, -2) @ q_t[..., None])[..., 0]
    return S, jnp.where(real[:, None, None], o_t, 0.0)

  xs = [jnp.moveaxis(jnp.asarray(a), 1, 0) for a in (q, k, v, beta, transition, mask)]
  S = jnp.zeros((batch, heads, key, v.shape[-1]))
  return jnp.moveaxis(jax.lax.scan(step, S, xs, reverse=reverse)[1], 0, 1)
