"""The shared conditional diffusion layer (ctrl_u, afa): diffusers' U-Nets and ControlNets built
from small configs or loaded by path or HF id (:mod:`.model`), DDPM noising and DDIM sampling with
classifier-free guidance through diffusers' schedulers (:mod:`.sampling`), and the Fréchet
distance between feature sets (:mod:`.fid`). No Ray and no I/O beyond ``from_pretrained``."""
