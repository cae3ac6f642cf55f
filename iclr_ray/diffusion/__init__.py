"""The shared conditional diffusion layer (ctrl_u, afa): diffusers' U-Nets and ControlNets built
from small configs or loaded by path or HF id (:mod:`.model`), DDPM noising and DDIM sampling with
classifier-free guidance through diffusers' schedulers (:mod:`.sampling`), and the Fréchet
distance between feature sets (:mod:`.fid`). No Ray; its only I/O is
saving and loading models at a location (a local folder or a URI: :mod:`iclr_ray.storage`)."""
