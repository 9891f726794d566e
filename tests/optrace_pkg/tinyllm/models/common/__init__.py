from tinyllm.models.common.forward_methods import AttnForwardMethod, MLAForwardMixin
